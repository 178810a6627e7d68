"""Reward workers on a real local Ray cluster: a head node plus a second node with a custom resource.

One cluster serves the whole module (and is shut down at its end, before other test folders start
their own Ray); a third node with another version of a plugin is added for one test.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from types import SimpleNamespace

import pytest

from rewardhub._targets import file_module_name
from rewardhub.cli import main
from rewardhub.distributed import RegistryMismatchError
from rewardhub.distributed import RewardWorkerPool
from rewardhub.distributed import runner_from_config
from rewardhub.errors import UsageError
from rewardhub.execution import Runner

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.ray

REWARDS = '''
import os
import time

DRIVER_PATH = {path!r}


def probe(*, response, extra_info=None, expected_module=None, **kwargs):
    """Length of the response, and where it ran."""
    info = extra_info or {{}}
    if response == "raise":
        raise RuntimeError("bad sample")
    if info.get("sleep"):
        time.sleep(info["sleep"])
    return {{"score": float(len(response)), "pid": os.getpid(), "i": info.get("i", -1),
            "module_ok": float(__name__ == expected_module), "shipped": float(__file__ != DRIVER_PATH)}}
'''


def _node_with(resource: str) -> str:
    return next(n["NodeID"] for n in ray.nodes() if n["Alive"] and resource in n["Resources"])


@pytest.fixture(scope="module")
def cluster(own_ray):
    from ray.cluster_utils import Cluster
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    c.add_node(num_cpus=2, resources={"node2": 100})
    ray.init(address=c.address, log_to_driver=False, include_dashboard=False)
    try:
        yield SimpleNamespace(cluster=c, address=c.address, head=_node_with("node:__internal_head__"),
                              node2=_node_with("node2"))
    finally:
        ray.shutdown()
        c.shutdown()


@pytest.fixture
def reward_file(tmp_path):
    """A reward file that exists only in this driver's temporary folder."""
    path = tmp_path / "driver_only" / "probe_rewards.py"
    path.parent.mkdir()
    path.write_text(REWARDS.format(path=str(path)))
    return path


def _files_env(tmp_path, name="node-files"):
    """Workers keep shipped files in a folder of their own (as a fresh node would)."""
    return {"env_vars": {"REWARDHUB_WORKER_FILES": str(tmp_path / name)}}


#: (response, ground truth, expected by math_verify and by reasoning_gym.basic_arithmetic)
CASES = [
    ("so <answer>12</answer>, i.e. \\boxed{12}", "12", 1.0),
    ("<answer>13</answer> \\boxed{13}", "12", 0.0),
]


def _samples():
    return [{"prompt": f"q{i}", "response": CASES[i % 2][0], "ground_truth": CASES[i % 2][1],
             "data_source": "basic_arithmetic", "extra_info": {"i": i}} for i in range(8)]


def test_three_sources_score_on_the_second_node(cluster, reward_file, tmp_path):
    cfg = {"rewards": [{"name": "math_verify"}, {"name": "reasoning_gym.basic_arithmetic", "kwargs": {}},
                       {"path": str(reward_file), "function": "probe",
                        "kwargs": {"expected_module": file_module_name(str(reward_file))}}],
           "workers": {"num_workers": 2, "resources": {"node2": 1}, "pool": "cpu_rewards"}}
    samples = _samples()
    with RewardWorkerPool(cfg, runtime_env=_files_env(tmp_path)) as pool:
        info = pool.workers_info()
        assert [w["node_id"] for w in info] == [cluster.node2] * 2
        pids = {w["pid"] for w in info}
        assert len(pids) == 2 and os.getpid() not in pids
        assert {w["registry_fingerprint"] for w in info} == {pool.fingerprint()}
        assert all(w["files"]["probe"].startswith(f"shipped {tmp_path / 'node-files'}") for w in info)
        res = pool.score(samples)
    expected = [CASES[i % 2][2] for i in range(8)]
    assert [r["math_verify"] for r in res.rewards] == expected
    assert [r["reasoning_gym.basic_arithmetic"] for r in res.rewards] == expected
    assert [r["probe"] for r in res.rewards] == [float(len(s["response"])) for s in samples]
    assert {e["probe"]["pid"] for e in res.extra} <= pids
    assert all(e["probe"]["module_ok"] == 1.0 and e["probe"]["shipped"] == 1.0 for e in res.extra)
    assert [e["probe"]["i"] for e in res.extra] == list(range(8))
    # the same data scored in this process gives the same rewards
    local_cfg = {k: v for k, v in cfg.items() if k != "workers"}
    with Runner.from_config(local_cfg) as runner:
        local = runner.score(samples)
    assert local.rewards == res.rewards
    assert local.scores == res.scores


def test_runner_ray_executor_round_robin(cluster, reward_file, tmp_path):
    cfg = {
        "rewards": [
            {"path": str(reward_file), "function": "probe", "executor": "ray", "on_failure": "nan"},
            {"name": "reasoning_gym.basic_arithmetic"},
        ],
        "workers": {"num_workers": 2, "dispatch": "round_robin"},
    }
    samples = [{"prompt": "1+1", "response": "<answer>2</answer>", "ground_truth": "2",
                "data_source": "basic_arithmetic", "extra_info": {"i": i}} for i in range(8)]
    samples[3]["response"] = "raise"
    with runner_from_config(cfg) as runner:
        res = runner.score(samples)
        pool = runner._remote[None].workers
        assert pool.pools()[0].dispatch == "round_robin" and len(pool.workers_info()) == 2
    probe = [r["probe"] for r in res.rewards]
    assert probe[3] != probe[3] and probe[:3] == [18.0] * 3  # NaN: on_failure applied by the driver
    assert "reward 'probe' on sample 3" in res.errors[3]["probe"] and "bad sample" in res.errors[3]["probe"]
    pids = {e["probe"]["pid"] for e in res.extra if "probe" in e}
    assert len(pids) == 2 and os.getpid() not in pids  # both workers got work
    assert [r["reasoning_gym.basic_arithmetic"] for r in res.rewards] == [1.0] * 3 + [0.0] + [1.0] * 4


def test_the_contract_checks_ray_for_a_reward_declared_there(cluster):
    """``rewardhub test`` leaves Ray out unless asked, or unless a term declares it, as here."""
    from rewardhub._contract import run_contract

    checks = run_contract({"rewards": [{"name": "exact_match", "executor": "ray"}]})
    same = next(c for c in checks if c.contract == "same on every executor")
    assert (same.status, same.detail) == ("pass", "inline, process, ray agree (as declared: ray)")


def test_killed_worker_is_replaced_and_nothing_is_lost(cluster, reward_file, tmp_path):
    cfg = {"rewards": [{"path": str(reward_file), "function": "probe"}],
           "workers": {"num_workers": 2, "resources": {"node2": 1}}}
    with RewardWorkerPool(cfg, runtime_env=_files_env(tmp_path), chunk_size=3) as pool:
        reward_file.unlink()  # from now on the file exists only in what the driver shipped
        victim = pool.workers_info()[0]["pid"]
        n = 36
        samples = [{"response": "x" * i, "extra_info": {"i": i, "sleep": 0.1}} for i in range(n)]
        scored = threading.Event()
        mid_batch: list[bool] = []  # whether the batch was still being scored when the kill came

        def kill() -> None:
            mid_batch.append(not scored.is_set())
            os.kill(victim, signal.SIGKILL)

        killer = threading.Timer(0.7, kill)  # the batch takes >= 36 x 0.1 s / 2 workers
        killer.start()
        res = pool.score(samples)
        scored.set()
        killer.join()
        after = pool.workers_info()
        # the replacement takes work (within the batch when it starts in time; on a loaded host the
        # survivor may finish that batch alone, so the next batch is where it is checked for sure)
        more = pool.score([{"response": "y" * i, "extra_info": {"i": i, "sleep": 0.05}} for i in range(12)])
    assert mid_batch == [True]  # the kill happened mid-batch
    assert res.scores == [float(i) for i in range(n)]
    assert [e["probe"]["i"] for e in res.extra] == list(range(n)) and not any(res.errors)
    assert (
        pool.restarts == 1 and after[0]["restarts"] == 1 and after[0]["pid"] != victim and after[0]["alive"]
    )
    assert res.metrics["reward_workers/reward/rescored_samples"] >= 1
    # the pool's figures, as the trainer's metrics carry them
    assert res.metrics["reward_workers/reward/calls_redispatched"] >= 1
    assert res.metrics["reward_workers/reward/replicas_replaced"] == 1.0
    assert res.metrics["reward_workers/reward/workers_max"] == 2.0
    waits = [res.metrics[f"reward_workers/reward/queue_wait_{q}_s"] for q in ("p50", "p99")]
    assert 0 <= waits[0] <= waits[1]
    assert more.scores == [float(i) for i in range(12)] and not any(more.errors)
    assert after[0]["pid"] in {e["probe"]["pid"] for e in res.extra + more.extra}  # the new worker scores


@pytest.mark.timeout(180)
@pytest.mark.parametrize(("term", "workers", "bound"), [
    ({}, {"call_timeout_s": 5}, 5),
    # derived: 4 samples x timeout_s 1 x (1 + 1 retry) + the slack (rewardhub.distributed._dispatch's 30 s)
    ({"timeout_s": 1, "retries": 1}, {}, 4 * 1 * 2 + 30),
])
def test_a_stopped_worker_is_killed_restarted_and_its_chunk_rescored(cluster, reward_file, tmp_path, term,
                                                                   workers, bound):
    """A worker that hangs (here SIGSTOPped: as a partitioned node or a reward model stuck in a kernel)
    made ``score`` wait for ever. Its call is bounded (reward.workers.call_timeout_s, else the terms'
    timeouts x the chunk's samples): past it the worker is killed, restarted, and its chunk scored
    again, with one line naming the worker and the reward; every sample gets its own score."""
    cfg = {"rewards": [{"path": str(reward_file), "function": "probe", **term}],
           "workers": {"num_workers": 2, **workers}}
    samples = [{"response": "x" * i, "extra_info": {"i": i}} for i in range(8)]
    with RewardWorkerPool(cfg, runtime_env=_files_env(tmp_path), chunk_size=4) as pool:
        victim = pool.workers_info()[0]["pid"]
        os.kill(victim, signal.SIGSTOP)  # the first chunk goes to worker 0 (least loaded, lowest index)
        try:
            t0 = time.monotonic()
            res = pool.score(samples)
            took = time.monotonic() - t0
            after = pool.workers_info()
            notes = pool.take_notes()
            gone = _gone(victim, 60.0)  # killed, not left stopped
        finally:
            _kill_if_alive(victim)
    assert res.scores == [float(i) for i in range(8)] and not any(res.errors)
    assert [e["probe"]["i"] for e in res.extra] == list(range(8))
    assert victim not in {e["probe"]["pid"] for e in res.extra}
    assert pool.restarts == 1 and after[0]["restarts"] == 1
    assert after[0]["pid"] != victim and after[0]["alive"]
    assert res.metrics["reward_workers/reward/rescored_samples"] == 4.0
    [note] = notes
    assert note.startswith("reward worker 0 of pool 'reward' on node ") and f"(pid {victim})" in note, note
    assert f"did not answer a chunk of 4 samples within {bound:g}s (reward 'probe';" in note, note
    assert note.endswith("killed, restarted, its chunk re-scored"), note
    assert took >= bound  # the bound was waited for, not skipped
    assert gone, f"the stopped worker (pid {victim}) was left behind"
    print(f"stopped worker: scored via a restart in {took:.1f}s")


def _gone(pid: int, timeout: float) -> bool:
    """Whether process ``pid`` ends (or is a zombie) within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/status") as f:
                if any(line.startswith("State:") and "Z" in line.split()[1] for line in f):
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.1)
    return False


def _kill_if_alive(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


COUNTED = """
def counted(*, response, log):
    with open(log, "a") as f:
        f.write(response + "\\n")
    return float(len(response))
"""


def test_cached_terms_keep_a_group_on_one_worker_and_say_their_hits(cluster, tmp_path):
    """The trainer's reward backend with a cached term: each GRPO group's identical completions cost one
    call, though the batch is cut into chunks for two workers, and the metrics say hits and misses."""
    path, log = tmp_path / "counted.py", tmp_path / "calls.txt"
    path.write_text(COUNTED)
    term = {"path": str(path), "function": "counted", "cache": True, "kwargs": {"log": str(log)}}
    cfg = {"rewards": [term], "workers": {"num_workers": 2}}
    samples = [{"prompt": f"q{g}", "response": f"{r} {g}", "ground_truth": "4", "extra_info": {"uid": g}}
               for g in range(2) for r in ("a", "bb", "a", "a", "ccc", "bb", "a", "a")]
    with RewardWorkerPool(cfg, runtime_env=_files_env(tmp_path)) as pool:
        res = pool.score(samples)
    assert sorted(log.read_text().split("\n")[:-1]) == sorted({s["response"] for s in samples})  # 6 calls
    assert res.scores == [float(len(s["response"])) for s in samples]
    assert (res.metrics["rewards/counted/cache_hits"], res.metrics["rewards/counted/cache_misses"]) == (10, 6)


def test_unplaceable_pool_fails_at_once(cluster, reward_file):
    with pytest.raises(UsageError, match=r"(?s)pool 'gpu' cannot be placed.*'nowhere': 1\.0.*node2=100"):
        RewardWorkerPool({"rewards": [{"name": "math_verify"}]}, num_workers=1, pool="gpu",
                         resources={"nowhere": 1})


def _fake_math_site(root):
    """A folder that, first on PYTHONPATH, makes rewardhub-math 0.2.0 declare the same entry point."""
    dist = root / "rewardhub_math-0.2.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: rewardhub-math\nVersion: 0.2.0\n")
    (dist / "entry_points.txt").write_text(
        "[rewardhub.rewards]\nmath_verify = rewardhub_math.reward:math_verify\n"
    )
    return root


def test_other_plugin_version_on_a_node(cluster, reward_file, tmp_path, capsys, cli):
    config = tmp_path / "config.yaml"
    config.write_text(json.dumps({"reward": {"rewards": [
        {"name": "math_verify"}, {"name": "reasoning_gym.basic_arithmetic"},
        {"path": str(reward_file), "function": "probe"}]}}))
    site = _fake_math_site(tmp_path / "site")
    node3 = cluster.cluster.add_node(num_cpus=1, resources={"node3": 10}, env_vars={"PYTHONPATH": str(site)})
    try:
        node3_id = _node_with("node3")
        assert main(["doctor", str(config), "--json"]) == 1
        cap = capsys.readouterr()
        report = json.loads(cap.out)
        nodes = {n["node_id"]: n for n in report["nodes"]}
        assert set(nodes) == {cluster.head, cluster.node2, node3_id}
        assert nodes[node3_id]["mismatched"] == [
            {
                "reward": "math_verify",
                "kind": "version",
                "driver": "rewardhub-math==0.1.0",
                "worker": "rewardhub-math==0.2.0",
            }
        ]
        assert not nodes[node3_id]["ok"] and nodes[cluster.head]["ok"] and nodes[cluster.node2]["ok"]
        assert nodes[cluster.head]["fingerprint"] == report["fingerprint"] != nodes[node3_id]["fingerprint"]
        assert "'math_verify'" in cap.err
        with pytest.raises(RegistryMismatchError) as info:
            RewardWorkerPool(json.loads(config.read_text())["reward"], num_workers=1, pool="node3_pool",
                             resources={"node3": 1})
        text = str(info.value)
        for part in ("'math_verify'", "driver rewardhub-math==0.1.0, worker rewardhub-math==0.2.0",
                     node3_id[:12], "pool 'node3_pool'"):
            assert part in text
        assert info.value.rewards == ["math_verify"]
    finally:
        cluster.cluster.remove_node(node3)
    deadline = time.monotonic() + 60
    while any(n["Alive"] and "node3" in n["Resources"] for n in ray.nodes()) and time.monotonic() < deadline:
        time.sleep(0.5)
    # the real command, from another process, against the cluster: every node agrees now
    proc = cli("doctor", str(config), "--address", cluster.address, "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert proc.stdout == json.dumps(report, indent=2, sort_keys=True) + "\n"
    assert {n["node_id"] for n in report["nodes"]} == {cluster.head, cluster.node2}
    assert all(
        n["ok"] and n["fingerprint"] == report["fingerprint"] and n["missing"] == [] for n in report["nodes"]
    )
    assert report["rewards"] == ["math_verify", "reasoning_gym.basic_arithmetic", "probe"]
