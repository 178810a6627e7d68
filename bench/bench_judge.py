"""``llm_judge`` rewards/s vs the same server's raw chat-completions throughput on the same requests
(goal: the reward layer costs <= 10 %), and ``max_rpm`` held within 5 %.

Server: the stub of tests/judge_stub.py in a process of its own, answering each request after a fixed
service time (``--service-ms``), or a running OpenAI-compatible server (``--url``, ``--model``; e.g. the
demo model under vLLM). Raw: the request bodies the judge sends (recorded by a first judge run on the
stub), replayed with aiohttp at the same concurrency. Judge: ``Runner.score`` of an ``llm_judge`` term
(the registry, the runner's async executor, prompt building, parsing). Rate: ``max_rpm`` against the
stub, from the stub's arrival times of the requests (first to last).

    .venv/bin/python bench/bench_judge.py [-n 400] [--concurrency 16] [--service-ms 20] [--rpm 1200]
    .venv/bin/python bench/bench_judge.py --url http://127.0.0.1:8000/v1 --model judge -n 64 --concurrency 8
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
from typing import Any

from _util import REPO

from rewardhub.execution import Runner

SAMPLES = [{"prompt": f"What is {i} + {i}?", "response": f"The sum is {2 * i}.", "ground_truth": str(2 * i),
            "data_source": "arith", "extra_info": {}} for i in range(10_000)]


def start_stub(service_s: float) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, os.path.join(REPO, "tests", "judge_stub.py"), str(service_s)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, f"http://127.0.0.1:{int(proc.stdout.readline())}"


def judge(url: str, model: str, n: int, concurrency: int, **kwargs: Any) -> tuple[float, float]:
    """rewards/s of an llm_judge term over the first n samples, and this process's CPU ms a reward."""
    term = {"name": "llm_judge", "max_concurrency": concurrency, "timeout_s": 600,
            "kwargs": {"base_url": url + "/v1", "model": model, "max_tokens": 8, **kwargs}}
    with Runner.from_config({"rewards": [term]}) as runner:
        runner.score(SAMPLES[:2])  # warm: the registry, aiohttp's import
        start, cpu = time.perf_counter(), time.process_time()
        res = runner.score(SAMPLES[:n])
        took, cpu = time.perf_counter() - start, time.process_time() - cpu
    failed = [e for e in res.errors if e]
    if len(failed) == n:  # no reward came back: a rate of failures is no judge's rate
        raise SystemExit(f"every one of the {n} judge calls failed (first: {failed[0]}): no rate to report\n"
                         "check --url, --model and that the reply holds a score (--template)")
    if failed:
        print(f"  {len(failed)} of {n} failed; first: {failed[0]}\n"
              f"  the rate counts the {n - len(failed)} scored only")
    return (n - len(failed)) / took, 1000 * cpu / n


async def _raw(url: str, bodies: list[dict[str, Any]], concurrency: int) -> tuple[float, float]:
    import aiohttp

    sem = asyncio.Semaphore(concurrency)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        async def one(body: dict[str, Any]) -> None:
            async with sem, session.post(url + "/v1/chat/completions", json=body) as resp:
                assert resp.status == 200, resp.status
                reply = await resp.json()
                assert reply["choices"][0]["message"]["content"] is not None

        await asyncio.gather(*(one(b) for b in bodies[:2]))
        start, cpu = time.perf_counter(), time.process_time()
        await asyncio.gather(*(one(b) for b in bodies))
        took, cpu = time.perf_counter() - start, time.process_time() - cpu
        return len(bodies) / took, 1000 * cpu / len(bodies)


def raw(url: str, bodies: list[dict[str, Any]], concurrency: int) -> tuple[float, float]:
    return asyncio.run(_raw(url, bodies, concurrency))


def recorded_bodies(n: int, model: str, extra: dict[str, Any]) -> list[dict[str, Any]]:
    """The bodies the judge sends for the first n samples (a judge run against an in-process stub)."""
    sys.path.insert(0, os.path.join(REPO, "tests"))
    from judge_stub import StubJudge

    stub = StubJudge()
    try:
        judge(stub.url[:-3], "m", n, 16, **extra)
        bodies = [r["body"] for r in stub.requests[2:]]
    finally:
        stub.close()
    return [{**b, "model": model} for b in bodies]


def arrivals(url: str) -> list[float]:
    with urllib.request.urlopen(url + "/arrivals") as resp:
        return sorted(json.load(resp))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=400)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--service-ms", type=float, default=20.0)
    ap.add_argument("--rpm", type=float, default=1200.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--url", help="a running server's base (without /v1); default: the stub")
    ap.add_argument("--model", default="stub")
    ap.add_argument("--template", help="llm_judge's template (a small model follows a short one better)")
    args = ap.parse_args()
    extra = {"template": args.template} if args.template else {}
    bodies = recorded_bodies(args.n, args.model, extra)
    proc = None
    url = args.url
    if url is None:
        proc, url = start_stub(args.service_ms / 1000)
    try:
        where = url if args.url else f"the stub ({args.service_ms:g} ms a request, its own process)"
        print(f"{args.n} requests, concurrency {args.concurrency}, against {where}")
        pairs = []
        for _ in range(args.repeat):  # interleaved, so that load on the host hits both alike
            pairs.append((raw(url, bodies, args.concurrency),
                          judge(url, args.model, args.n, args.concurrency, **extra)))
        raw_best, judge_best = max(p[0][0] for p in pairs), max(p[1][0] for p in pairs)
        raw_cpu, judge_cpu = min(p[0][1] for p in pairs), min(p[1][1] for p in pairs)
        print(f"  raw chat-completions: {raw_best:.1f} requests/s, {raw_cpu:.2f} client CPU ms each "
              f"(best of {args.repeat}: {', '.join(f'{p[0][0]:.1f}' for p in pairs)})")
        print(f"  llm_judge:            {judge_best:.1f} rewards/s, {judge_cpu:.2f} client CPU ms each "
              f"(best of {args.repeat}: {', '.join(f'{p[1][0]:.1f}' for p in pairs)})")
        print(f"  reward layer cost: {100 * (1 - judge_best / raw_best):.1f} % of the rate (goal <= 10 %); "
              f"{judge_cpu - raw_cpu:.2f} CPU ms a reward on top of the request")
        if args.url is None:
            n_rate = max(20, int(args.rpm / 60 * 10))  # about 10 s of requests
            judge(url, args.model, n_rate, args.concurrency, max_rpm=args.rpm)
            times = arrivals(url)[-n_rate:]
            held = (n_rate - 1) / (times[-1] - times[0]) * 60
            print(f"  max_rpm {args.rpm:g}: {held:.1f} requests/min over {n_rate} requests "
                  f"({100 * (held / args.rpm - 1):+.2f} %, goal within 5 %)")
    finally:
        if proc is not None:
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait(10)


if __name__ == "__main__":
    main()
