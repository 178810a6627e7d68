"""Reward pools on a cluster (issue 45, section 6), each figure against a baseline run in the same script:

1. node removed at 50 %: a 3-node ``ray.cluster_utils.Cluster`` (one worker slot per node), a pool of 3
   reward workers; the node of one worker is removed while it holds calls of the second half. Reports
   the samples lost and scored twice (the set of sample indexes out against the set in), the calls
   re-dispatched, the pool's figures, and the wall time against the same run with no node removed.
2. ``max_rpm`` from 3 processes: three drivers of one Ray cluster score ``llm_judge`` against one stub
   (tests/judge_stub.py) with ``max_rpm``; the stub's arrivals give the rate (first 5 arrivals left out:
   each process's first call also opens its HTTP session). Baseline: the same three processes outside
   Ray, each with its own bucket.

    .venv/bin/python bench/bench_fleet.py [-n 300] [--rpm 1200] [--calls 100]
    .venv/bin/python bench/bench_fleet.py burst|cache|data|replicas [their flags]  (bench/fleet_*.py)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _util import REPO

sys.path.insert(0, os.path.join(REPO, "tests"))

GATED = '''
import os
import time


def gated(*, response, log_dir, half, gate, **kwargs):
    i = int(response[1:])
    time.sleep(0.005)
    if gate and i >= half:
        with open(os.path.join(log_dir, "waiting"), "a") as f:
            import ray
            f.write(f"{ray.get_runtime_context().get_node_id()} {os.getpid()}\\n")
        end = time.monotonic() + 120
        while not os.path.exists(os.path.join(log_dir, "gate")) and time.monotonic() < end:
            time.sleep(0.02)
    return float(i)
'''


def _wait_for(cond, timeout: float = 180.0):
    end = time.monotonic() + timeout
    while not (got := cond()):
        if time.monotonic() > end:
            raise SystemExit("timed out")
        time.sleep(0.05)
    return got


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def node_loss(n: int, remove: bool, root: Path) -> dict:
    import ray
    from ray.cluster_utils import Cluster

    from rewardhub.distributed import RewardWorkerPool

    log_dir = root / ("loss" if remove else "base")
    log_dir.mkdir()
    reward = root / "gated.py"  # one file for both runs (a process registers a file reward once)
    reward.write_text(GATED)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    nodes = [cluster.add_node(num_cpus=1, resources={"fleet": 1}) for _ in range(3)]
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        cfg = {"rewards": [{"path": str(reward), "function": "gated",
                            "kwargs": {"log_dir": str(log_dir), "half": n // 2, "gate": remove}}],
               "workers": {"num_workers": 3, "num_cpus": 1, "resources": {"fleet": 1},
                           "replace_timeout_s": 10}}
        samples = [{"prompt": "q", "response": f"r{i}"} for i in range(n)]
        with RewardWorkerPool(cfg) as pool:
            out: dict = {}
            t0 = time.monotonic()
            th = threading.Thread(target=lambda: out.update(res=pool.score(samples)))
            th.start()
            if remove:
                waiting = log_dir / "waiting"
                def held() -> dict[str, str]:
                    lines = waiting.read_text().splitlines() if waiting.exists() else []
                    return dict(line.split() for line in lines)

                by_node = _wait_for(lambda: len(h := held()) == 3 and h)
                victim = next(x for x in nodes if x.node_id in by_node)
                cluster.remove_node(victim, allow_graceful=False)
                # its worker may outlive the raylet a moment: the gate opens once it is gone
                _wait_for(lambda: not _alive(int(by_node[victim.node_id])))
                (log_dir / "gate").touch()
                gone_at = time.monotonic()
            th.join(300)
            wall = time.monotonic() - t0
            after = time.monotonic() - gone_at if remove else 0.0
            figures = pool.pool_figures()
        scores = out["res"].scores
        got = [int(s) for s in scores if s == s]
        return {"wall_s": wall, "after_s": after, "lost": len(set(range(n)) - set(got)),
                "twice": len(got) - len(set(got)), "rows": len(scores), "pools": figures}
    finally:
        ray.shutdown()
        cluster.shutdown()


CLIENT = """
import json, os, sys, time
url, rpm, go, calls, address = sys.argv[1], float(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5]
if address:
    import ray
    ray.init(address=address, log_to_driver=False)
from rewardhub.execution import Runner
samples = [{"prompt": "p", "response": f"r{i}", "ground_truth": "4", "data_source": "d"}
           for i in range(calls)]
kw = {"base_url": url, "model": "stub", "backoff_s": 0.01, "max_rpm": rpm}
with Runner.from_config({"rewards": [{"name": "llm_judge", "kwargs": kw, "cache": False}]}) as runner:
    open(go + "." + str(os.getpid()), "w").close()
    while not os.path.exists(go):
        time.sleep(0.02)
    res = runner.score(samples)
print(json.dumps(sum(r["llm_judge"] == 7.0 for r in res.rewards)))
"""


def three_processes(rpm: float, calls: int, address: str, root: Path) -> float:
    """Requests a minute that three processes sent together (the stub's arrivals)."""
    from judge_stub import StubJudge

    stub = StubJudge()
    go = root / f"go-{bool(address)}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    try:
        args = [sys.executable, "-c", CLIENT, stub.url, str(rpm), str(go), str(calls), address]
        procs = [subprocess.Popen(args, env=env, stdout=subprocess.PIPE, text=True) for _ in range(3)]
        _wait_for(lambda: len(list(root.glob(go.name + ".*"))) == 3)
        go.touch()
        ok = [int(p.communicate(timeout=600)[0].splitlines()[-1]) for p in procs]
        assert ok == [calls] * 3, ok
        t = sorted(r["t"] for r in stub.requests)[5:]
        return (len(t) - 1) / (t[-1] - t[0]) * 60.0
    finally:
        stub.close()


#: the other figures of issue 45 section 6, one script each: name -> (module, what it measures)
PARTS = {
    "burst": ("fleet_burst", "an autoscaling pool under a burst of judge calls vs a fixed pool of 1"),
    "cache": ("fleet_cache", "the cache across nodes; max_concurrency across processes"),
    "data": ("fleet_data", "score --address on 3 nodes vs local score"),
    "replicas": ("fleet_replicas", "two vLLM judge replicas, one killed mid-run"),
}


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in PARTS:  # the part's own flags follow its name
        import importlib

        importlib.import_module(PARTS[argv[0]][0]).main(argv[1:])
        return
    ap = argparse.ArgumentParser(epilog="the other parts: bench_fleet.py PART [its flags]; " + "; ".join(
        f"{k}: {v[1]}" for k, v in PARTS.items()))
    ap.add_argument("-n", type=int, default=300, help="samples in the node-loss run")
    ap.add_argument("--rpm", type=float, default=1200)
    ap.add_argument("--calls", type=int, default=100, help="judge calls per process")
    a = ap.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="bench-fleet-"))

    base = node_loss(a.n, False, root)
    loss = node_loss(a.n, True, root)
    [pool] = loss["pools"]
    print(f"node removed at 50 %: {loss['rows']} rows of {a.n}, {loss['lost']} lost, {loss['twice']} scored "
          "twice; "
          f"{pool['calls_redispatched']} calls re-dispatched, workers {pool['workers']}, queue wait p50 "
          f"{pool['queue_wait_p50_s']:.3f}s p99 {pool['queue_wait_p99_s']:.3f}s")
    print(f"  finished {loss['after_s']:.1f}s after the node's worker was gone; wall {loss['wall_s']:.1f}s "
          f"vs {base['wall_s']:.1f}s with no node removed ({loss['wall_s'] / base['wall_s']:.2f}x; includes "
          f"waiting for the removal); baseline lost {base['lost']}, twice {base['twice']}")

    from ray.cluster_utils import Cluster

    head = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        shared = three_processes(a.rpm, a.calls, head.address, root)
    finally:
        head.shutdown()
    alone = three_processes(a.rpm, a.calls, "", root)
    print(f"max_rpm {a.rpm:g} from 3 processes ({3 * a.calls} calls): {shared:.0f}/min in a Ray cluster "
          f"({shared / a.rpm:.3f}x the limit) vs {alone:.0f}/min outside Ray, each process on its own "
          f"({alone / a.rpm:.2f}x)")


if __name__ == "__main__":
    main()
