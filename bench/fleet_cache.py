"""The fleet's limits and cache (issue 45, sections 3 and 6), each figure against a baseline run in the same
script:

1. the cache: a ``ray.cluster_utils.Cluster`` with node A and node B; ``llm_judge`` (against a stub judge,
   tests/judge_stub.py, of ``--service-s`` a call) scores ``-n`` samples on a pool pinned to node A, then
   the same samples on a pool pinned to node B, both naming one ``cache_dir``. Reports the hit rate on B
   (expected 100 %), the judge calls B made (expected 0), the entries in the cache file after the run, and
   B's rewards/s against the same run on B with the cache off.
2. ``max_concurrency`` from 3 processes: three drivers of one Ray cluster score ``llm_judge`` with the
   endpoint's ``max_concurrency`` against one stub that records the most requests it held at once.
   Baseline: the same three processes outside Ray, each keeping to the limit on its own.

    .venv/bin/python bench/fleet_cache.py [-n 200] [--service-s 0.05] [--limit 2] [--calls 12]
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from _util import REPO

sys.path.insert(0, os.path.join(REPO, "tests"))


def _wait_for(cond, timeout: float = 180.0):
    end = time.monotonic() + timeout
    while not (got := cond()):
        if time.monotonic() > end:
            raise SystemExit("timed out")
        time.sleep(0.05)
    return got


def _cfg(url: str, node: str, cache: bool) -> dict:
    return {"rewards": [{"name": "llm_judge", "cache": cache,
                         "kwargs": {"base_url": url, "model": "stub", "backoff_s": 0.01}}],
            "workers": {"num_workers": 1, "num_cpus": 1, "resources": {node: 1}}}


def fleet_cache(n: int, service_s: float, root: Path) -> dict:
    """Hit rate on node B of the calls made on node A, and B's rewards/s with the cache and without (the
    cluster started here: head, node A, node B)."""
    from judge_stub import StubJudge

    from rewardhub.distributed import RewardWorkerPool

    samples = [{"prompt": "p", "response": f"r{i}", "ground_truth": "4", "data_source": "d"}
               for i in range(n)]
    stub = StubJudge(service_s=service_s)
    out: dict = {}
    try:
        cache = root / "cache"
        with RewardWorkerPool(_cfg(stub.url, "node_a", True), cache_dir=str(cache)) as pool_a:
            res = pool_a.score(samples)
        out["calls_a"] = len(stub.requests)
        assert all(r["llm_judge"] == 7.0 for r in res.rewards)
        with RewardWorkerPool(_cfg(stub.url, "node_b", True), cache_dir=str(cache)) as pool_b:
            pool_b.score(samples[:1])  # the worker's first call (its imports) is not what is measured
            before = len(stub.requests)
            t0 = time.perf_counter()
            res = pool_b.score(samples)
            out["cached_s"] = time.perf_counter() - t0
        out["calls_b"] = len(stub.requests) - before
        out["hits_b"] = res.metrics.get("rewards/llm_judge/cache_hits", 0.0)
        assert all(r["llm_judge"] == 7.0 for r in res.rewards)
        with RewardWorkerPool(_cfg(stub.url, "node_b", False)) as plain:
            plain.score(samples[:1])
            before = len(stub.requests)
            t0 = time.perf_counter()
            res = plain.score(samples)
            out["plain_s"] = time.perf_counter() - t0
        out["calls_plain"] = len(stub.requests) - before
        assert all(r["llm_judge"] == 7.0 for r in res.rewards)
        with sqlite3.connect(cache / "scores.sqlite") as db:
            out["on_disk"] = db.execute("SELECT COUNT(*) FROM scores").fetchone()[0]
    finally:
        stub.close()
    return out


CLIENT = """
import json, os, sys, time
url, limit, go, calls, address = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5]
if address:
    import ray
    ray.init(address=address, log_to_driver=False)
from rewardhub.execution import Runner
samples = [{"prompt": "p", "response": f"r{i}", "ground_truth": "4", "data_source": "d"}
           for i in range(calls)]
kw = {"base_url": url, "model": "stub", "backoff_s": 0.01, "max_concurrency": limit}
with Runner.from_config({"rewards": [{"name": "llm_judge", "kwargs": kw, "cache": False}]}) as runner:
    open(go + "." + str(os.getpid()), "w").close()
    while not os.path.exists(go):
        time.sleep(0.02)
    res = runner.score(samples)
print(json.dumps(sum(r["llm_judge"] == 7.0 for r in res.rewards)))
"""


def three_processes(limit: int, calls: int, service_s: float, address: str, root: Path) -> int:
    """The most requests the stub held at once while three processes scored together."""
    from judge_stub import StubJudge

    stub = StubJudge(service_s=service_s)
    go = root / f"go-{bool(address)}"
    # the cluster's own auth setting stays (a local Ray started in this process turned tokens on)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_") or k.startswith("RAY_AUTH")}
    try:
        args = [sys.executable, "-c", CLIENT, stub.url, str(limit), str(go), str(calls), address]
        procs = [subprocess.Popen(args, env=env, stdout=subprocess.PIPE, text=True) for _ in range(3)]
        _wait_for(lambda: len(list(root.glob(go.name + ".*"))) == 3)
        go.touch()
        ok = [int(p.communicate(timeout=600)[0].splitlines()[-1]) for p in procs]
        assert ok == [calls] * 3, ok
        return stub.peak
    finally:
        stub.close()


def main(argv: Sequence[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=200, help="samples scored on node A, then on node B")
    ap.add_argument("--service-s", type=float, default=0.05, help="the stub judge's seconds a call")
    ap.add_argument("--limit", type=int, default=2, help="the endpoint's max_concurrency")
    ap.add_argument("--calls", type=int, default=12, help="judge calls per process (max_concurrency)")
    a = ap.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="bench-fleet-cache-"))

    import ray
    from ray.cluster_utils import Cluster

    # one cluster for both figures (a host this loaded may not start a second one in time)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=1, resources={"node_a": 1})
        cluster.add_node(num_cpus=1, resources={"node_b": 1})
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        c = fleet_cache(a.n, a.service_s, root)
        shared = three_processes(a.limit, a.calls, 0.2, cluster.address, root)
    finally:
        ray.shutdown()
        cluster.shutdown()
    rate, base = a.n / c["cached_s"], a.n / c["plain_s"]
    hit = c["hits_b"] / a.n
    print(f"fleet cache: {a.n} judge calls made on node A; on node B {hit:.0%} hits, {c['calls_b']} calls "
          f"({c['on_disk']} entries in the cache file after the run)")
    print(f"  node B: {rate:.0f} rewards/s with the fleet cache vs {base:.0f} rewards/s with no cache "
          f"({c['calls_plain']} calls) = {rate / base:.1f}x")

    alone = three_processes(a.limit, a.calls, 0.2, "", root)
    print(f"max_concurrency {a.limit} from 3 processes ({3 * a.calls} calls): peak {shared} in flight in a "
          f"Ray cluster ({shared / a.limit:.2f}x the limit) vs {alone} outside Ray, each process on its own "
          f"({alone / a.limit:.2f}x)")
    figures = {"hit_rate_b": hit, "calls_b": c["calls_b"], "on_disk": c["on_disk"], "rewards_s_cached": rate,
               "rewards_s_plain": base, "peak_shared": shared, "peak_alone": alone, "limit": a.limit}
    print(json.dumps(figures))
    return figures


if __name__ == "__main__":
    main()
