"""Resources asked are resources used: ``resources:`` parsing, the placement plan, and a real
``ray.cluster_utils.Cluster`` whose nodes declare GPUs (``num_gpus=2``) on this CPU-only machine.

The cluster runs in a child process (a pytest process may already hold the session's local Ray,
and a driver connects to one cluster only); it prints JSON that the tests check.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from rewardhub.errors import UsageError
from rewardhub_trainer.config import parse_config
from rewardhub_trainer.placement import Resources
from rewardhub_trainer.placement import RoleResources
from rewardhub_trainer.placement import bundles
from rewardhub_trainer.placement import parse_resources
from rewardhub_trainer.placement import plan
from rewardhub_trainer.placement_doctor import plan_report

NODES = [{"NodeID": "a" * 40, "Alive": True, "Resources": {"CPU": 2.0, "GPU": 2.0}},
         {"NodeID": "b" * 40, "Alive": True, "Resources": {"CPU": 2.0, "GPU": 2.0}},
         {"NodeID": "h" * 40, "Alive": True, "Resources": {"CPU": 1.0}}]
GPU1 = {"num_gpus": 1}


def test_parse_resources_defaults_and_errors():
    assert parse_resources(None) == Resources()
    res = parse_resources({"placement": "spread", "learner": {"num_cpus": 1, "num_gpus": 1}, "nnodes": 2})
    assert res.learner == RoleResources(1.0, 1.0) and res.rollouter == RoleResources() and res.nnodes == 2
    assert res.reward_worker is None
    custom = parse_resources({"learner": {"num_cpus": 1, "resources": {"accel": "2"}}})
    assert custom.learner == RoleResources(1.0, 0.0, {"accel": 2.0})
    assert custom.learner.as_ray() == {"CPU": 1.0, "accel": 2.0}
    assert custom.to_dict()["learner"] == {"num_cpus": 1.0, "num_gpus": 0.0, "resources": {"accel": 2.0}}
    # no custom: the shape as before
    assert custom.to_dict()["rollouter"] == {"num_cpus": 0.0, "num_gpus": 0.0}
    # the one wording of rewardhub.config.fields
    for raw, message in [
        (
            {"placement": "scatter"},
            r"^resources.placement='scatter' is not valid\nallowed: pack, spread, strict_pack, "
            r"strict_spread$",
        ),
        (
            {"learners": {}},
            r"^unknown key resources.learners\ndid you mean resources.learner\? "
            r"allowed: evaluator, gpus_per_node, learner, nnodes",
        ),
        (
            {"learner": {"gpus": 1}},
            r"^unknown key resources.learner.gpus\ndid you mean "
            r"resources.learner.num_gpus\? allowed: num_cpus, num_gpus, "
            r"resources$",
        ),
        (
            {"rollouter": {"num_gpus": -1}},
            r"^resources.rollouter.num_gpus=-1.0 is not valid\nallowed: a value >= 0$",
        ),
        ({"nnodes": 1.5}, r"^resources.nnodes=1.5 is not valid\nexpected an integer$"),
        (
            {"learner": {"resources": {"accel": -1}}},
            r"^resources.learner.resources.accel=-1.0 is not valid\nallowed: a value >= 0$",
        ),
        (
            {"rollouter": {"resources": {"accel": "many"}}},
            r"^resources.rollouter.resources.accel='many' is not valid\nexpected a number$",
        ),
        (
            {"reward_worker": {"resources": {"GPU": 1}}},
            r"^resources.reward_worker.resources.GPU=1.0 is not valid: CPUs and GPUs have keys of "
            r"their own\nset resources.reward_worker.num_gpus instead$",
        ),
    ]:
        with pytest.raises(UsageError, match=message):
            parse_resources(raw)


def test_cuda_learner_without_a_gpu_is_refused_before_ray():
    cfg = {"model": {"tiny": {"arch": "qwen2"}}, "reward": {"rewards": [{"name": "exact_match"}]},
           "trainer": {"device": "cuda"}}
    with pytest.raises(
        UsageError, match=r"^trainer.device='cuda' is not valid: the learner asks Ray for no GPU"
    ):
        parse_config(cfg)
    cfg["resources"] = {"learner": GPU1}  # the rollouter would see no GPU either
    with pytest.raises(
        UsageError, match=r"^trainer.device='cuda' is not valid: the rollouter asks Ray for no GPU"
    ):
        parse_config(cfg)
    cfg["resources"] = {"learner": GPU1, "rollouter": {"num_gpus": 0.5}}
    assert parse_config(cfg).resources.learner.num_gpus == 1
    cfg["data"] = {"val_files": "v.jsonl"}
    cfg["resources"]["evaluator"] = {"num_cpus": 1}
    with pytest.raises(
        UsageError, match=r"^trainer.device='cuda' is not valid: the evaluator asks Ray for no GPU"
    ):
        parse_config(cfg)


def test_plan_pack_and_spread():
    res = parse_resources({"learner": GPU1, "rollouter": GPU1})
    items = bundles(res, 1)
    assert [b.name for b in items] == ["learner 0", "rollouter 0"]
    assert plan(items, NODES, "pack") == ["a" * 40] * 2
    assert plan(items, NODES, "spread") == ["a" * 40, "b" * 40]
    four = bundles(res, 3)
    assert sorted(plan(four, NODES, "spread")) == ["a" * 40] * 2 + ["b" * 40] * 2
    assert bundles(Resources(), 4) == []  # nothing asked: no placement group


@pytest.mark.parametrize(
    ("raw", "rollouters", "message"),
    [
        ({"rollouter": {"num_gpus": 2}}, 3, r"6 GPU asked in all, the cluster has 4"),
        (
            {"placement": "strict_pack", "learner": {"num_gpus": 2}, "rollouter": GPU1},
            1,
            r"strict_pack needs every bundle on one node",
        ),
        (
            {"placement": "strict_spread", "rollouter": GPU1},
            3,
            r"no node has room for rollouter 2 .* on a node of its own",
        ),
        ({"learner": {"num_gpus": 3}}, 0, r"no node has room for learner 0 \(GPU=3\)"),
    ],
)
def test_plan_says_what_the_cluster_lacks(raw, rollouters, message):
    with pytest.raises(UsageError, match=message) as err:
        plan(bundles(parse_resources(raw), rollouters), NODES, parse_resources(raw).placement)
    assert "the cluster:" in str(err.value) and "GPU=2" in str(err.value)


def test_plan_report_for_doctor():
    res = parse_resources({"learner": GPU1, "rollouter": GPU1, "placement": "spread", "gpus_per_node": 4})
    lines = plan_report(res, 2, NODES, {"CPU": 1.0, "GPU": 0.0}, 2)
    assert lines[0] == f"learner 0: GPU=1 on node {'a' * 12} (spread)"
    assert lines[1].startswith("rollouter 0: GPU=1 on node bbbbbbbbbbbb")
    assert "reward_worker x2: CPU=1 each" in lines
    assert any("gpus_per_node=4 on 1 node(s), but 0 node(s)" in x for x in lines)


CLUSTER_SCRIPT = textwrap.dedent('''
    import json, os, sys
    import ray
    from ray.cluster_utils import Cluster
    from rewardhub.errors import UsageError
    from rewardhub.distributed import process_location
    from rewardhub_trainer.placement import Placement, parse_resources

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0})
    # the first GPU node also declares a custom resource, "accel"
    nodes = [cluster.add_node(num_cpus=2, num_gpus=2, resources={"accel": 2} if i == 0 else {})
             for i in range(2)]
    out = {"gpu_nodes": [n.node_id for n in nodes], "head": cluster.head_node.node_id, "cases": {}}
    try:
        ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
        cluster.wait_for_nodes()

        @ray.remote(num_cpus=0)
        class Probe:
            def where(self):
                return {**process_location(), "cuda_visible": os.environ.get("CUDA_VISIBLE_DEVICES")}

        cases = {
            "pack": ({"learner": {"num_gpus": 1}, "rollouter": {"num_gpus": 1}}, 1),
            "spread": ({"placement": "spread", "learner": {"num_gpus": 1}, "rollouter": {"num_gpus": 1}}, 1),
            "spread4": ({"placement": "spread", "learner": {"num_gpus": 1}, "rollouter": {"num_gpus": 1}}, 3),
            "lacks": ({"rollouter": {"num_gpus": 2}}, 3),
            "nnodes": ({"nnodes": 4, "gpus_per_node": 2}, 1),
            "custom": ({"learner": {"resources": {"accel": 1}}, "rollouter": {"resources": {"accel": 1}}}, 1),
            "custom_missing": ({"learner": {"num_cpus": 1, "resources": {"tpu_v9": 1}}}, 1),
        }
        for name, (raw, rollouters) in cases.items():
            try:
                placement = Placement(parse_resources(raw), rollouters, timeout_s=60)
            except UsageError as exc:
                out["cases"][name] = {"error": str(exc)}
                continue
            actors = [("learner", 0)] + [("rollouter", i) for i in range(rollouters)]
            handles = [Probe.options(**placement.options(role, i)).remote() for role, i in actors]
            got = ray.get([h.where.remote() for h in handles], timeout=120)
            out["cases"][name] = {"actors": [{"role": r, "index": i, **g} for (r, i), g in zip(actors, got)],
                                  "expected": placement.expected}
            for h in handles:
                ray.kill(h)
            placement.remove()
        from rewardhub.distributed import RewardWorkerPool
        try:  # a reward worker asking for a resource no node has: an error before any worker starts
            RewardWorkerPool({"rewards": [{"name": "exact_match"}]}, num_workers=1, resources={"tpu_v9": 1})
            out["cases"]["pool_missing"] = {"error": None}
        except UsageError as exc:
            out["cases"]["pool_missing"] = {"error": str(exc)}
        if os.environ.get("RUN_TRAINER"):
            from rewardhub_trainer.cli import train
            summary = train(sys.argv[1], [], output=sys.argv[2])
            keys = ("workers", "devices", "resources", "steps", "accounting_exact")
            out["summary"] = {k: summary[k] for k in keys}
    finally:
        print("RESULT " + json.dumps(out))
        ray.shutdown()
        cluster.shutdown()
''')


@pytest.fixture(scope="module")
def cluster_run(tmp_path_factory, model_cache):
    """Run CLUSTER_SCRIPT once: the placement cases, then a tiny training run with GPU resources."""
    tmp = tmp_path_factory.mktemp("placement")
    examples = Path(__file__).resolve().parents[2] / "examples"
    cfg = yaml.safe_load((examples / "tiny.yaml").read_text())
    cfg["trainer"].update(total_steps=2, checkpoint_every=0, num_rollouters=2, mode="fully_async")
    cfg["rollout"].update(n=2, prompts_per_step=2, max_new_tokens=4)
    cfg["resources"] = {
        "placement": "spread",
        "learner": {"num_gpus": 1, "num_cpus": 0.5},
        "rollouter": {"num_gpus": 1},
        "reward_worker": {"num_cpus": 0.5, "resources": {"accel": 0.5}},
    }
    config = tmp / "config.yaml"
    config.write_text(yaml.safe_dump(cfg))
    env = {
        **os.environ,
        "RUN_TRAINER": "1",
        "REWARDHUB_CACHE": str(model_cache),
        "RAY_USAGE_STATS_ENABLED": "0",
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run([sys.executable, "-c", CLUSTER_SCRIPT, str(config), str(tmp / "run")], env=env,
                          capture_output=True, text=True, timeout=540)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(line[len("RESULT "):])


def _check_gpus(actors):
    for a in actors:
        assert len(a["gpu_ids"]) == 1
        assert a["cuda_visible"] == ",".join(a["gpu_ids"])  # each actor sees only its GPUs
    by_node: dict[str, list[str]] = {}
    for a in actors:
        by_node.setdefault(a["node"], []).extend(a["gpu_ids"])
    for ids in by_node.values():
        assert len(ids) == len(set(ids))  # no GPU given twice on a node
    return by_node


@pytest.mark.timeout(600)
def test_pack_puts_learner_and_rollouter_on_one_gpu_node(cluster_run):
    actors = cluster_run["cases"]["pack"]["actors"]
    by_node = _check_gpus(actors)
    assert len(by_node) == 1 and set(by_node) <= set(cluster_run["gpu_nodes"])


@pytest.mark.timeout(600)
def test_spread_puts_them_on_different_nodes(cluster_run):
    actors = cluster_run["cases"]["spread"]["actors"]
    _check_gpus(actors)
    assert {a["node"] for a in actors} == set(cluster_run["gpu_nodes"])
    four = cluster_run["cases"]["spread4"]["actors"]
    by_node = _check_gpus(four)
    assert sorted(len(v) for v in by_node.values()) == [2, 2]  # 2 GPUs used on each GPU node
    assert cluster_run["head"] not in by_node


@pytest.mark.timeout(600)
def test_a_cluster_that_lacks_the_gpus_is_a_clear_error(cluster_run):
    lacks = cluster_run["cases"]["lacks"]["error"]
    assert lacks.startswith("resources: the cluster cannot place the run (pack): 6 GPU asked in all, the "
                            "cluster has 4")
    nnodes = cluster_run["cases"]["nnodes"]["error"]
    assert nnodes.startswith("resources: resources.nnodes=4 but the cluster has 3 alive node(s)")


@pytest.mark.timeout(600)
def test_the_trainer_places_its_actors_and_reports_them(cluster_run):
    summary = cluster_run["summary"]
    assert summary["steps"] == 2 and summary["accounting_exact"]
    placed = [w for w in summary["workers"] if w["role"] in ("learner", "rollouter")]
    from rewardhub_trainer import devices

    choice = devices.choose("cpu")
    assert sorted(w["role"] for w in placed) == ["learner", "rollouter", "rollouter"]
    for w in placed:
        assert len(w["gpu_ids"]) == 1 and w["node"] in cluster_run["gpu_nodes"]
        assert w["device"] == "cpu"  # the GPUs are declared only: torch sees no CUDA here
        # the dtype the CPU's capability chooses (bf16 generation where the CPU has native bf16)
        want = {"learner": choice.model_dtype, "rollouter": choice.rollout_dtype}[w["role"]]
        assert w["dtype"].startswith(want), (w, choice)
    # spread over 2 GPU nodes: 3 GPUs, both nodes used, no GPU id twice on a node
    nodes = {}
    for w in placed:
        nodes.setdefault(w["node"], []).extend(w["gpu_ids"])
    assert len(nodes) == 2 and all(len(v) == len(set(v)) for v in nodes.values())
    assert summary["devices"]["learner"]["device"] == "cpu"
    assert summary["resources"]["learner"] == {"num_cpus": 0.5, "num_gpus": 1.0}
    workers = [w for w in summary["workers"] if w["role"] == "reward_worker"]
    assert workers and all(w["gpu_ids"] == [] for w in workers if "gpu_ids" in w)
    # the reward workers asked for the custom resource "accel": they run on the one node that has it
    assert {w["node"] for w in workers} == {cluster_run["gpu_nodes"][0]}
    assert summary["resources"]["reward_worker"] == {
        "num_cpus": 0.5,
        "num_gpus": 0.0,
        "resources": {"accel": 0.5},
    }


@pytest.mark.timeout(600)
def test_custom_resources_place_the_actors_on_the_node_that_declares_them(cluster_run):
    actors = cluster_run["cases"]["custom"]["actors"]
    assert [a["role"] for a in actors] == ["learner", "rollouter"]
    assert {a["node"] for a in actors} == {cluster_run["gpu_nodes"][0]}  # the only node with "accel"
    missing = cluster_run["cases"]["custom_missing"]["error"]
    assert missing.startswith(
        "resources: the cluster cannot place the run (pack): 1 tpu_v9 asked in all, the "
        "cluster has 0\nasked: learner 0: CPU=1, tpu_v9=1\nthe cluster:\n"
    )
    assert "accel=2" in missing  # the nodes are listed with their custom resources
    pool = cluster_run["cases"]["pool_missing"]["error"]
    assert pool is not None and pool.startswith(
        "reward worker pool 'reward' cannot be placed: each worker needs "
    )
    assert "tpu_v9" in pool.splitlines()[0]


def test_doctor_lines_from_a_training_config():
    from rewardhub.config import load_config
    from rewardhub_trainer.placement_doctor import doctor_lines

    nodes = [{"node_id": n["NodeID"], "ip": "10.0.0.1", "resources": n["Resources"]} for n in NODES]
    cfg = load_config(None, ["trainer.n_gpus_per_node=2", "trainer.nnodes=2",
                             "reward.rewards=[{name: exact_match}]", "reward.workers.num_workers=3"])
    lines = doctor_lines(cfg, nodes)
    # verl's keys: 4 GPUs, the learner one, 3 rollouters of one GPU; pack fills node a, then b
    assert lines[0] == "trainer pools (resources:):"
    assert lines[1:5] == [f"  learner 0: GPU=1 on node {'a' * 12} (pack)",
                          f"  rollouter 0: GPU=1 on node {'a' * 12} (pack)",
                          f"  rollouter 1: GPU=1 on node {'b' * 12} (pack)",
                          f"  rollouter 2: GPU=1 on node {'b' * 12} (pack)"]
    assert "  reward_worker x3: CPU=1 each" in lines
    short = doctor_lines(load_config(None, ["trainer.n_gpus_per_node=2", "trainer.nnodes=3",
                                            "reward.rewards=[{name: exact_match}]"]), nodes)
    assert short[1].startswith(
        "  trainer pools: PROBLEM: resources: the cluster cannot place the run (pack): "
        "6 GPU asked in all, the cluster has 4"
    )
