"""A node of a 3-node cluster (``ray.cluster_utils.Cluster``) removed mid-run: every sample gets
exactly one row, the dead worker's calls run again on the other nodes, and a pool with nowhere left
to place the worker says so once and finishes with the workers it has (it used to never exit).

Each worker node has one ``fleet`` slot, so the lost worker has nowhere to go. The reward blocks every
sample of the second half until the test opens a gate, so the node is removed while it holds calls.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.ray

N = 60

REWARD = '''
import os
import time


def gated(*, response, log_dir, half, **kwargs):
    """Scores sample ``r<i>`` as i; from ``half`` on, waits for the gate (where it ran is logged)."""
    import ray

    i = int(response[1:])
    node = ray.get_runtime_context().get_node_id()
    if i >= half:
        with open(os.path.join(log_dir, "waiting"), "a") as f:
            f.write(f"{node} {i} {os.getpid()}\\n")
        end = time.monotonic() + 120
        while not os.path.exists(os.path.join(log_dir, "gate")) and time.monotonic() < end:
            time.sleep(0.05)
    with open(os.path.join(log_dir, "scored"), "a") as f:
        f.write(f"{node} {i} {os.getpid()}\\n")
    return float(i)
'''


@pytest.fixture
def three_nodes(tmp_path, own_ray):
    from ray.cluster_utils import Cluster
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    nodes = [c.add_node(num_cpus=1, resources={"fleet": 1}) for _ in range(3)]
    c.wait_for_nodes()
    try:
        yield c, nodes
    finally:
        c.shutdown()


def _wait_for(cond, what: str, timeout: float = 300.0):
    end = time.monotonic() + timeout
    while not (got := cond()):
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.1)
    return got


def _alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie no longer does)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def _lines(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.timeout(600)
def test_score_on_three_nodes_losing_one_writes_each_row_once_and_exits(three_nodes, tmp_path):
    cluster, nodes = three_nodes
    reward = tmp_path / "gated.py"
    reward.write_text(REWARD)
    cfg = tmp_path / "fleet.yaml"
    cfg.write_text(yaml.safe_dump({"reward": {
        "rewards": [{"path": str(reward), "function": "gated", "executor": "ray",
                     "kwargs": {"log_dir": str(tmp_path), "half": N // 2}}],
        "workers": {"num_workers": 3, "num_cpus": 1, "resources": {"fleet": 1}, "address": cluster.address,
                    "call_timeout_s": 300, "replace_timeout_s": 20}}}))
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"id": i, "prompt": "q", "response": f"r{i}"}) + "\n"
                            for i in range(N)))
    out, summary = tmp_path / "out.jsonl", tmp_path / "summary.json"
    # the cluster's own auth setting stays (a local Ray started earlier in this process turned tokens on)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_") or k.startswith("RAY_AUTH")}
    env.update(RAY_USAGE_STATS_ENABLED="0")
    with open(tmp_path / "stderr", "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "rewardhub", "score", str(cfg), str(data),
                                 "--no-progress", "-o", str(out), "--summary-json", str(summary)],
                                stderr=err, env=env, cwd=tmp_path)
        try:
            # every worker holds a call of the second half: remove the node of one of them
            def three_holding():
                assert proc.poll() is None, (tmp_path / "stderr").read_text()[-3000:]  # it ended: why
                nodes_waiting = {n for n, *_ in _lines(tmp_path / "waiting")}
                return nodes_waiting if len(nodes_waiting) == 3 else None

            waiting = _wait_for(three_holding, "three workers holding calls")
            victim = next(n for n in nodes if n.node_id in waiting)
            cluster.remove_node(victim, allow_graceful=False)
            pids = {int(p) for n, _, p in _lines(tmp_path / "waiting") if n == victim.node_id}
            _wait_for(lambda: not any(_alive(p) for p in pids), "the removed node's worker to end")
            (tmp_path / "gate").touch()
            rc = proc.wait(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    stderr = (tmp_path / "stderr").read_text()
    assert rc == 0, stderr[-3000:]
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == list(range(N))  # each sample one row, in order: none lost, none twice
    assert {r["id"] for r in rows} == set(range(N))
    assert [r["score"] for r in rows] == [float(i) for i in range(N)]
    # the lost worker's calls ran again on the nodes left
    survivors = {n.node_id for n in nodes if n is not victim}
    redone = {int(i) for n, i, _ in _lines(tmp_path / "scored") if n in survivors}
    lost = {int(i) for n, i, _ in _lines(tmp_path / "waiting") if n == victim.node_id}
    assert lost and lost <= redone
    # one line says the pool goes on with fewer workers
    said = [line for line in stderr.splitlines() if "cannot be placed again" in line]
    assert len(said) == 1 and said[0].startswith("WARNING"), stderr[-3000:]
    assert " with 2 of 3 workers" in said[0]
    pools = json.loads(summary.read_text())["pools"]
    [pool] = pools
    assert pool["workers"] == {"min": 2, "max": 3, "now": 2} and pool["calls_redispatched"] >= 1
    # one restart for the lost worker; on a loaded host Ray may first place it on the node on its way out,
    # where it dies while starting and is restarted once more (the group's _settle)
    assert 1 <= pool["replicas_replaced"] <= 2 and pool["pool"] == "reward"
    assert 0 <= pool["queue_wait_p50_s"] <= pool["queue_wait_p99_s"]


@pytest.fixture
def one_node(own_ray):
    from ray.cluster_utils import Cluster
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    node = c.add_node(num_cpus=1, resources={"fleet": 1})
    c.wait_for_nodes()
    ray.init(address=c.address, log_to_driver=False)
    try:
        yield c, node
    finally:
        ray.shutdown()
        c.shutdown()


@pytest.mark.timeout(300)
def test_a_pool_whose_last_node_goes_stops_with_an_error_not_a_hang(one_node, tmp_path, capfd):
    """Its only worker's node removed, nowhere left to place it: scoring stops with an error naming the
    pool once ``replace_timeout_s`` has passed (it used to wait for ever)."""
    from rewardhub.distributed import RewardWorkerPool
    from rewardhub.distributed import WorkerFailedError

    cluster, node = one_node
    reward = tmp_path / "gated.py"
    reward.write_text(REWARD)
    cfg = {"rewards": [{"path": str(reward), "function": "gated",
                        "kwargs": {"log_dir": str(tmp_path), "half": 0}}],
           "workers": {"num_workers": 1, "num_cpus": 1, "resources": {"fleet": 1}, "replace_timeout_s": 5}}
    with RewardWorkerPool(cfg) as pool:
        out: dict = {}

        def score() -> None:
            try:
                out["res"] = pool.score([{"prompt": "q", "response": f"r{i}"} for i in range(4)])
            except Exception as exc:  # noqa: BLE001 - what the test looks at
                out["error"] = exc

        th = threading.Thread(target=score, daemon=True)
        th.start()
        [(_, _, pid)] = _wait_for(lambda: _lines(tmp_path / "waiting")[:1], "the worker holding a call")
        cluster.remove_node(node, allow_graceful=False)
        _wait_for(lambda: not _alive(int(pid)), "the removed node's worker to end")
        (tmp_path / "gate").touch()
        th.join(240)
        assert not th.is_alive(), "scoring never ended"
        figures = pool.pool_figures()
    assert isinstance(out.get("error"), WorkerFailedError), out
    assert "every reward worker of pool 'reward' is gone" in str(out["error"])
    said = [line for line in capfd.readouterr().err.splitlines() if "cannot be placed again" in line]
    assert len(said) == 1 and "within 5s" in said[0] and "going on with 0 of 1 workers" in said[0]
    assert figures[0]["workers"]["now"] == 0
