"""Reward workers on Ray: cold start to first score with 200 extra entry points, and throughput.

* cold start: a new :class:`RewardWorkerPool` of one worker until its first score returned (actor
  process start, registry build from every source, fingerprint check, loading the rewards), with
  200 generated ``rewardhub.rewards`` entry points on the workers' ``PYTHONPATH``; the worker's own
  share (registry build + verification + loading) is printed too, and a no-op Ray actor's start
  as the floor.
* throughput: the same samples scored by the in-process runner, by 1 and by 2 reward workers
  (printed as ratios to the in-process runner), for math_verify + a regex reward and for a cheap
  inline reward only.

Run: ``python bench/bench_ray_workers.py`` (starts a local Ray with 4 logical CPUs).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time

from _util import REPO

from rewardhub.testing import write_distribution

MATH_CFG = {"rewards": [{"name": "math_verify", "timeout_s": 5},
                        {"name": "regex_match", "alias": "boxed", "weight": 0.1,
                         "kwargs": {"pattern": "\\\\boxed\\{.+\\}"}}]}
CHEAP_CFG = {"rewards": [{"name": "reasoning_gym.basic_arithmetic"}]}


def _samples(k: int) -> list[dict]:
    with open(os.path.join(REPO, "examples", "math_samples.jsonl"), encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [dict(rows[i % len(rows)]) for i in range(k)]


def _gen_dists(root: str, n: int = 200) -> None:
    for i in range(n):
        write_distribution(
            root,
            f"gen-reward-{i}",
            "1.0",
            {"rewardhub.rewards": {f"gen_{i}": f"gen_mod_{i}:score"}},
            {f"gen_mod_{i}": f"def score(**kw):\n    '''Generated reward {i}.'''\n    return 1.0\n"},
        )


def _noop_actor_start(ray) -> float:
    @ray.remote(num_cpus=1)
    class Noop:
        def ping(self) -> int:
            return os.getpid()

    t = time.perf_counter()
    a = Noop.remote()
    ray.get(a.ping.remote())
    dt = time.perf_counter() - t
    ray.kill(a)
    return dt


def cold_start(ray, repeat: int = 3) -> None:
    from rewardhub.distributed import RewardWorkerPool

    sample = _samples(1)
    floor = statistics.median(_noop_actor_start(ray) for _ in range(repeat))
    for label, env in (("entry-point scan cached", {}), ("no scan cache (REWARDHUB_NO_CACHE=1)",
                                                         {"REWARDHUB_NO_CACHE": "1"})):
        totals, inside = [], []
        for _ in range(repeat):
            t = time.perf_counter()
            pool = RewardWorkerPool(MATH_CFG, num_workers=1, runtime_env={"env_vars": env} if env else None)
            pool.score(sample)
            totals.append(time.perf_counter() - t)
            inside.append(pool.workers_info()[0]["start_s"])
            n = len(pool.setup.driver_items)
            pool.close()
        tot, ins = statistics.median(totals), statistics.median(inside)
        print(f"cold start to first score, {n} rewards in the registry, {label}: {tot:.2f}s "
              f"(worker's registry build + verification + loading: {ins:.3f}s; no-op actor start "
              f"{floor:.2f}s -> ratio {tot / floor:.2f}x)")


def _time(fn, repeat: int = 3) -> float:
    fn()  # warm-up: process pools, imports, caches
    return statistics.median(_timed(fn) for _ in range(repeat))


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def throughput(n: int) -> None:
    from rewardhub.distributed import RewardWorkerPool
    from rewardhub.execution import Runner

    samples = _samples(n)
    for label, cfg in (("math_verify + regex (process executor)", MATH_CFG),
                       ("basic_arithmetic (inline)", CHEAP_CFG)):
        with Runner.from_config(cfg) as runner:
            base = _time(lambda: runner.score(samples))
            ref = runner.score(samples).scores
        print(f"{label}: in-process runner {n / base:,.0f} samples/s")
        for k in (1, 2):
            with RewardWorkerPool(cfg, num_workers=k) as pool:
                t = _time(lambda: pool.score(samples))
                assert pool.score(samples).scores == ref
            print(f"  {k} reward worker(s): {n / t:,.0f} samples/s -> ratio to in-process {base / t:.2f}x")


def main() -> None:
    import ray

    with tempfile.TemporaryDirectory() as d:
        _gen_dists(d)
        os.environ["PYTHONPATH"] = os.pathsep.join([d, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        sys.path.insert(0, d)
        ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
        try:
            print(f"cpus: {os.cpu_count()} (Ray told 4)")
            cold_start(ray)
            throughput(int(os.environ.get("BENCH_SAMPLES", "2000")))
        finally:
            ray.shutdown()


if __name__ == "__main__":
    main()
