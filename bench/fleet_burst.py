"""A burst of judge calls on an autoscaling reward pool (issue 45, section 6, first figure).

A stub judge (aiohttp, in a process of its own, 127.0.0.1) answers each chat call in 200 +/- 50 ms
(uniform, seeded); the reward is the real ``llm_judge`` with ``max_concurrency: 4`` (4 calls at a time per
worker). The same burst of ``-n`` samples (one judge call each) is scored:

1. baseline: a fixed pool of 1 worker (``reward.workers.num_workers: 1``);
2. autoscaling: ``reward.workers.autoscale: {min_workers: 1, max_workers: M}`` from 1 replica: the time
   until Serve runs 2..M replicas (from the burst's start), the wall time and the throughput;
3. the same burst again at once, the pool scaled: queue-wait p99 (a call's wait for a free worker, the
   pool's own figure) and throughput as a % of what M workers x 4 calls / 0.2 s can serve;
4. idle: the time from the end of the last burst until Serve is back at ``min_workers``.

Every burst checks its rows: one per sample, each the judge's 7.0 (a wrong or missing row is counted).

    .venv/bin/python bench/fleet_burst.py [-n 2000] [--max-workers 8] [--idle-s 10] [--chunk 16]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from typing import Any

STUB = r'''
import asyncio, json, random, sys
from aiohttp import web

rng = random.Random(0)
BODY = json.dumps({"id": "x", "object": "chat.completion", "model": "stub",
                   "choices": [{"index": 0, "finish_reason": "stop",
                                "message": {"role": "assistant", "content": "Score: 7"}}],
                   "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})
peak = inflight = 0

async def chat(request):
    global peak, inflight
    await request.read()
    inflight += 1
    peak = max(peak, inflight)
    try:
        await asyncio.sleep(rng.uniform(0.15, 0.25))
    finally:
        inflight -= 1
    return web.Response(text=BODY, content_type="application/json")

async def stats(request):
    return web.json_response({"peak": peak})

async def main():
    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/stats", stats)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    print(runner.addresses[0][1], flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
'''

#: calls one worker has the stub serve per second: 4 at a time, 0.2 s each on average
PER_WORKER = 4 / 0.2


def _config(url: str, workers: dict[str, Any]) -> dict[str, Any]:
    kw = {"base_url": url, "model": "stub", "backoff_s": 0.01}
    return {"rewards": [{"name": "llm_judge", "kwargs": kw, "cache": False, "max_concurrency": 4}],
            "workers": {"num_cpus": 0.5, **workers}}


def _samples(n: int) -> list[dict[str, Any]]:
    return [{"prompt": f"q{i}", "response": f"r{i}", "ground_truth": "4", "data_source": "d"}
            for i in range(n)]


def _burst(pool: Any, samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Score one burst; its wall time, wrong rows and the pool's queue waits of this burst only."""
    group = pool.groups[0]
    group.figures._waits.clear()
    t0 = time.monotonic()
    res = pool.score(samples)
    wall = time.monotonic() - t0
    wrong = sum(1 for s in res.scores if s != 7.0) + abs(len(res.scores) - len(samples))
    p50, p99 = group.figures.wait_percentile(0.5), group.figures.wait_percentile(0.99)
    return {"wall_s": round(wall, 2), "rows": len(res.scores), "wrong": wrong,
            "calls_per_s": round(len(samples) / wall, 1), "queue_wait_p50_s": p50, "queue_wait_p99_s": p99}


class _Watch:
    """The replica count, polled in a thread: when each count was first seen (seconds from ``t0``)."""

    def __init__(self, group: Any) -> None:
        self.group, self.t0, self.first = group, time.monotonic(), {}
        self.asked: dict[int, float] = {}  #: when Serve first wanted that many (running + starting)
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            states = self.group.replica_states()
            count = states.get("RUNNING", 0)
            at = time.monotonic() - self.t0
            for c in range(1, count + states.get("STARTING", 0) + 1):
                self.asked.setdefault(c, round(at, 2))
            self.samples.append((at, count))
            for c in range(1, count + 1):
                self.first.setdefault(c, round(at, 2))
            self._stop.wait(0.25)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def replica_seconds(self, until: float) -> float:
        """The integral of the running replicas over [0, until] (what they could serve, x PER_WORKER)."""
        total, last_t, last_c = 0.0, 0.0, 1
        for at, count in self.samples:
            if at > until:
                break
            total += (at - last_t) * last_c
            last_t, last_c = at, count
        return total + max(0.0, until - last_t) * last_c


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=2000, help="judge calls in the burst")
    ap.add_argument("--max-workers", type=int, default=8)
    ap.add_argument("--target-wait-s", type=float, default=1.0)
    ap.add_argument("--idle-s", type=float, default=10.0)
    ap.add_argument("--chunk", type=int, default=16, help="samples per pool call (both pools)")
    ap.add_argument("--cpus", type=int, default=16, help="logical CPUs of the local Ray")
    ap.add_argument("--skip-baseline", action="store_true")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args(argv)

    import ray

    from rewardhub.distributed import RewardWorkerPool

    stub = subprocess.Popen([sys.executable, "-c", STUB], stdout=subprocess.PIPE, text=True)
    out: dict[str, Any] = {"n": args.n, "max_workers": args.max_workers, "host_cpus": os.cpu_count(),
                           "stub_capacity_per_worker_calls_s": PER_WORKER}
    try:
        assert stub.stdout is not None
        url = f"http://127.0.0.1:{int(stub.stdout.readline())}/v1"
        ray.init(address="local", num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
        samples = _samples(args.n)
        if not args.skip_baseline:
            with RewardWorkerPool(_config(url, {"num_workers": 1}), chunk_size=args.chunk) as pool:
                pool.score(samples[:8])  # warm: the HTTP session
                base = _burst(pool, samples)
            base["throughput_pct_of_capacity"] = round(100 * base["calls_per_s"] / PER_WORKER, 1)
            out["fixed_1"] = base
            print(f"fixed pool of 1: {json.dumps(base)}", flush=True)
        scale = {"min_workers": 1, "max_workers": args.max_workers, "target_wait_s": args.target_wait_s,
                 "idle_s": args.idle_s}
        cfg = _config(url, {"num_workers": 1, "autoscale": scale})
        with RewardWorkerPool(cfg, chunk_size=args.chunk) as pool:
            group = pool.groups[0]
            pool.score(samples[:8])
            watch = _Watch(group)
            first = _burst(pool, samples)
            wall = first["wall_s"]
            first["replicas_running_first_seen_s"] = dict(watch.first)
            first["replicas_asked_first_seen_s"] = dict(watch.asked)
            first["throughput_pct_of_running_replicas"] = round(
                100 * args.n / (PER_WORKER * watch.replica_seconds(wall)), 1)
            out["autoscale_from_1"] = first
            print(f"autoscale, burst from 1 replica: {json.dumps(first)}", flush=True)
            scaled = _burst(pool, samples)
            scaled["replicas"] = group.replica_count()
            scaled["throughput_pct_of_capacity"] = round(
                100 * scaled["calls_per_s"] / (PER_WORKER * args.max_workers), 1)
            out["autoscale_scaled"] = scaled
            print(f"autoscale, same burst once scaled: {json.dumps(scaled)}", flush=True)
            t0 = time.monotonic()
            while group.replica_count() > scale["min_workers"] and time.monotonic() - t0 < args.idle_s + 300:
                time.sleep(0.25)
            out["back_to_min_s"] = round(time.monotonic() - t0, 2)
            out["back_to_min_replicas"] = group.replica_count()
            watch.stop()
            out["pool_figures"] = pool.pool_figures()
        print(f"back to min_workers after idle: {out['back_to_min_s']} s (idle_s {args.idle_s:g}; "
              f"replicas now {out['back_to_min_replicas']})")
        if "fixed_1" in out:
            b, s = out["fixed_1"], out["autoscale_scaled"]
            print(f"queue-wait p99: scaled {s['queue_wait_p99_s']:.3f}s vs fixed pool of 1 "
                  f"{b['queue_wait_p99_s']:.3f}s; throughput {s['calls_per_s']} vs {b['calls_per_s']} "
                  "calls/s "
                  f"-> {s['calls_per_s'] / b['calls_per_s']:.2f}x")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(out, f, indent=1)
        return 0
    finally:
        try:
            from ray import serve

            serve.shutdown()
        except Exception:  # noqa: BLE001
            pass
        ray.shutdown()
        stub.terminate()
        stub.wait(10)


if __name__ == "__main__":
    sys.exit(main())
