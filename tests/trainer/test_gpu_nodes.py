"""On a GPU node, an actor Ray gave no GPU sees none and runs on the CPU (issue 27 §1).

Ray 2.60 no longer sets ``CUDA_VISIBLE_DEVICES`` for an actor that asked for no GPU, so on a node
with GPUs such an actor sees every one of them and ``trainer.device=auto`` would put it on cuda:0,
beside the GPU's real owner. A ``ray.cluster_utils.Cluster`` whose one node declares 2 GPUs (none
exist here) runs a short training with a validation set: two data-parallel learner ranks, two
rollouters and the reward workers ask for no GPU, the evaluation actor asks for one
(``resources.evaluator``). Every actor reports, from inside its own process, what
``CUDA_VISIBLE_DEVICES`` holds and the device it chose (``summary.json``'s ``workers``).

The cluster runs in a child process (a pytest process may already hold the session's local Ray).
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

SCRIPT = textwrap.dedent('''
    import json, sys
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 4, "num_gpus": 2})
    out = {}
    try:
        ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
        from rewardhub_trainer.cli import train
        summary = train(sys.argv[1], [], output=sys.argv[2])
        out = {k: summary[k] for k in ("workers", "devices", "resources", "steps", "accounting_exact")}
        out["val"] = [sorted(v) for v in summary.get("val", [])]
    finally:
        print("RESULT " + json.dumps(out))
        ray.shutdown()
        cluster.shutdown()
''')


@pytest.fixture(scope="module")
def gpu_node_run(tmp_path_factory, model_cache):
    tmp = tmp_path_factory.mktemp("gpu-node")
    examples = Path(__file__).resolve().parents[2] / "examples"
    val = tmp / "val.jsonl"
    val.write_text(
        "".join(json.dumps({"question": f"{i}+1=", "answer": str(i + 1)}) + "\n" for i in range(3))
    )
    cfg = yaml.safe_load((examples / "tiny.yaml").read_text())
    cfg["trainer"].update(total_steps=2, checkpoint_every=0, num_rollouters=2, num_learners=2, mode="sync",
                          test_freq=-1, val_before_train=True)
    cfg["rollout"].update(n=2, prompts_per_step=2, max_new_tokens=4)
    cfg["data"]["val_files"] = str(val)
    cfg["resources"] = {"learner": {"num_cpus": 0.5}, "evaluator": {"num_gpus": 1},
                        "reward_worker": {"num_cpus": 0.5}}
    config = tmp / "config.yaml"
    config.write_text(yaml.safe_dump(cfg))
    env = {**os.environ, "REWARDHUB_CACHE": str(model_cache), "RAY_USAGE_STATS_ENABLED": "0",
           "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    for key in ("RAY_ADDRESS", "CUDA_VISIBLE_DEVICES", "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO"):
        env.pop(key, None)
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(config), str(tmp / "run")], env=env,
                          capture_output=True, text=True, timeout=540)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(line[len("RESULT "):])
    assert result, proc.stdout[-3000:] + proc.stderr[-3000:]
    return result


@pytest.mark.timeout(600)
def test_every_actor_given_no_gpu_sees_none_and_runs_on_the_cpu(gpu_node_run):
    run = gpu_node_run
    assert run["steps"] == 2 and run["accounting_exact"]
    workers = run["workers"]
    roles = sorted(w["role"] for w in workers)
    assert roles.count("learner") == 2 and roles.count("rollouter") == 2 and "evaluator" in roles
    assert roles.count("reward_worker") >= 1 and "reward_client" in roles
    for w in workers:
        if w["role"] == "evaluator":
            continue
        # asked for no GPU on a node with 2: Ray's switch (and the actor itself) made them invisible
        assert w.get("gpu_ids", []) == [], w
        assert w["cuda_visible"] == "", w
        if w["role"] in ("learner", "rollouter"):
            assert w["device"] == "cpu", w  # chosen from what it sees: auto with no GPU is the CPU
    assert run["devices"]["learner"]["reason"].startswith("no GPU given to this actor")
    assert run["devices"]["rollouter"]["cuda_visible_devices"] == ""


@pytest.mark.timeout(600)
def test_the_evaluator_is_placed_by_its_own_resources_entry(gpu_node_run):
    (ev,) = [w for w in gpu_node_run["workers"] if w["role"] == "evaluator"]
    assert len(ev["gpu_ids"]) == 1
    assert ev["cuda_visible"] == ev["gpu_ids"][0]  # exactly the GPU Ray gave it
    assert ev["device"] == "cpu"  # the GPU is declared only: torch here has no CUDA
    assert gpu_node_run["devices"]["evaluator"]["cuda_visible_devices"] == ev["gpu_ids"][0]
    assert gpu_node_run["resources"]["evaluator"] == {"num_cpus": 0.0, "num_gpus": 1.0}
    assert gpu_node_run["val"], "the evaluation ran"
