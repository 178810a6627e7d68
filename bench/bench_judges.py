"""The judging modes' figures against the stub judge of tests/judge_stub.py (issue 47 §4).

The stub is right on clear cases and, on near-ties, picks the first position with probability 0.7 (else
it is right). Figures, each printed:
- position: 1,000 near-tie pairs against a reference: wrong verdicts without swap, wrong wins and ties
  with ``swap: true``;
- tournament: groups of 8 with clear qualities, calls per group both ways and one way, Kendall's tau of
  the rewards against the true order;
- rubric: 12 criteria at ``max_criteria: 4``: calls a sample, and the most requests the stub saw in flight
  against ``max_in_flight``;
- calibration: 200 gold labels, kappa of a guessing judge (refused by the gate) and of a good one;
- failures: an endpoint failing 30 % of calls (no retries): failed samples, samples scored 0 among them,
  failed calls counted;
- overhead: a one-way tournament through the Runner against raw aiohttp requests of the same bodies to a
  stub in a process of its own at 20 ms a request, same concurrency (goal: <= 10 %).

    .venv/bin/python bench/bench_judges.py [--pairs 1000] [--groups 40] [--service-ms 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from typing import Any

from _util import REPO

sys.path.insert(0, os.path.join(REPO, "tests"))
from judge_stub import StubJudge  # noqa: E402
from judge_stub import pair_judge  # noqa: E402
from judge_stub import rubric_judge  # noqa: E402
from judge_stub import score_judge  # noqa: E402

from rewardhub.builtin.judging import _call  # noqa: E402
from rewardhub.builtin.judging.stats import kendall_tau  # noqa: E402
from rewardhub.execution import Runner  # noqa: E402


def score(stub_url: str, name: str, rows: list[dict[str, Any]], term: dict[str, Any] | None = None,
          **kwargs: Any) -> Any:
    kw = {"base_url": stub_url, "model": "m", "backoff_s": 0.01, **kwargs}
    with Runner.from_config({"rewards": [{"name": name, "kwargs": kw, **(term or {})}]}) as runner:
        return runner.score(rows)


def position(stub: StubJudge, pairs: int) -> None:
    rng = random.Random(7)
    rows, truth = [], []
    for k in range(pairs):
        q = rng.randint(2, 8)
        better = rng.random() < 0.5
        rows.append({"prompt": f"pos {k}", "response": f"q={q + (0.5 if better else -0.5)}",
                     "ground_truth": f"q={q}", "extra_info": {"uid": f"p{k}"}})
        truth.append(better)
    for swap in (False, True):
        stub.reset(pair_judge(p_first=0.7, near=1.0, seed=11))
        _call._CACHE.clear()  # every call made, for the count
        res = score(stub.url, "llm_judge_pairwise", rows, swap=swap)
        wrong = sum((s == 1.0 and not t) or (s == 0.0 and t) for s, t in zip(res.scores, truth))
        ties = sum(s == 0.5 for s in res.scores)
        print(f"position, {pairs} near-tie pairs, swap {str(swap).lower():<5}: wrong verdicts "
              f"{100 * wrong / pairs:5.1f} %, ties {100 * ties / pairs:5.1f} %, calls {len(stub.requests)}")


def tournament(stub: StubJudge, groups: int) -> None:
    rng = random.Random(5)
    for pattern, want in (("all_pairs_both_ways", 56), ("all_pairs_one_way", 28)):
        stub.reset(pair_judge(p_first=0.7, near=1.0, seed=3))
        rows, qs = [], []
        for g in range(groups):
            q = rng.sample(range(0, 16, 2), 8)  # clear: no two closer than 2
            qs.append(q)
            rows += [{"prompt": f"t {pattern} {g}", "response": f"q={x}",
                      "extra_info": {"uid": f"{pattern}{g}"}} for x in q]
        res = score(stub.url, "llm_judge_pairwise", rows, mode="tournament", pattern=pattern)
        per_group = {sum(int(o.extra.get("judge_calls", 0)) for o in res.outcomes["llm_judge_pairwise"][g * 8:
                                                                                               g * 8 + 8])
                     for g in range(groups)}
        taus = [kendall_tau(res.scores[g * 8:g * 8 + 8], qs[g]) for g in range(groups)]
        print(f"tournament {pattern:<20}: calls per group of 8 {sorted(per_group)} (want {want}), "
              f"stub requests {len(stub.requests)} = {groups} x {len(stub.requests) / groups:g}, Kendall tau "
              f"mean {statistics.fmean(taus):.3f} min {min(taus):.3f}")


def rubric(stub: StubJudge, n: int = 50, limit: int = 4) -> None:
    stub.reset(rubric_judge, service_s=0.02)
    words = "alpha beta gamma delta eps zeta eta theta iota kappa lam mu".split()
    crit = [{"text": f"mentions '{w}'", "weight": k + 1} for k, w in enumerate(words)]
    rows = [{"prompt": f"r {k}", "response": " ".join(random.Random(k).sample(words, 5))} for k in range(n)]
    res = score(stub.url, "llm_judge_rubric", rows, criteria=crit, max_criteria=4, max_in_flight=limit)
    print(f"rubric, 12 criteria at max_criteria 4: {len(stub.requests) / n:g} calls a sample; most in flight "
          f"{stub.peak} (max_in_flight {limit}); failed {sum(bool(e) for e in res.errors)}")


def calibration(stub: StubJudge, tmp: str) -> None:
    from rewardhub.builtin.judging import calibrate

    rng = random.Random(3)
    gold = os.path.join(tmp, "gold.jsonl")
    with open(gold, "w") as f:
        for _ in range(200):
            q = rng.randint(0, 9)
            f.write(json.dumps({"prompt": "p", "response": f"q={q} " + "x" * rng.randint(0, 40),
                                "label": int(q >= 5)}) + "\n")
    for who, answer in (("guessing", score_judge(guess=True, seed=1)), ("good", score_judge())):
        stub.reset(answer)
        calibrate.FIGURES.clear()
        _call._CACHE.clear()
        term = {"name": "llm_judge_sampled", "kwargs": {"base_url": stub.url, "model": "m"},
                "calibration": {"gold": gold, "min_kappa": 0.6}}
        with Runner.from_config({"rewards": [term]}) as runner:
            problems = calibrate.calibration_problems(runner.terms[0])
        fig = next(iter(calibrate.FIGURES.values()))
        print(f"calibration, 200 gold labels, {who:<8} judge: kappa {fig['kappa']:.3f}, agreement "
              f"{fig['agreement']:.3f}, calls {fig['judge_calls']}: "
              + (f"REFUSED ({problems[0]})" if problems else "passes min_kappa 0.6"))


def failures(stub: StubJudge, n: int = 1000) -> None:
    rng = random.Random(9)
    stub.reset(lambda body, k: (503, "overloaded") if rng.random() < 0.3 else score_judge()(body, k))
    rows = [{"prompt": f"f {k}", "response": f"q={k % 10} #{k}"} for k in range(n)]
    res = score(stub.url, "llm_judge_sampled", rows, retries=0)
    failed = [i for i, e in enumerate(res.errors) if e]
    zero = sum(res.scores[i] == 0.0 for i in failed)
    m = res.metrics
    kinds = {e["llm_judge_sampled"].split(")")[0] + ")" for e in res.errors if e}
    print(f"failures, endpoint failing 30 % ({n} samples, no retries): {len(failed)} failed samples "
          f"({', '.join(sorted(kinds))}), {zero} of them scored 0, all NaN: "
          f"{all(math.isnan(res.scores[i]) for i in failed)}; judge_failed "
          f"{m['rewards/llm_judge_sampled/judge_failed']:g}, "
          f"errors {m['rewards/llm_judge_sampled/errors']:g}, "
          f"stub saw {len(stub.requests)} requests")
    stub.reset(lambda body, k: (503, "overloaded") if rng.random() < 0.3 else score_judge()(body, k))
    rows = [{"prompt": f"f2 {k}", "response": f"q={k % 10} #{k}"} for k in range(n)]
    res = score(stub.url, "llm_judge_sampled", rows, retries=6)
    print(f"failures, same endpoint with retries 6: {sum(bool(e) for e in res.errors)} failed samples, "
          f"{len(stub.requests) - n} retried requests")


def overhead(service_ms: float, groups: int, concurrency: int = 16) -> None:
    import aiohttp

    stub_py = os.path.join(REPO, "tests", "judge_stub.py")
    proc = subprocess.Popen([sys.executable, stub_py, str(service_ms / 1000), "pair"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    url = f"http://127.0.0.1:{int(proc.stdout.readline())}"
    try:
        rows = [{"prompt": f"o {g}", "response": f"q={x}", "extra_info": {"uid": f"o{g}"}}
                for g in range(groups) for x in random.Random(g).sample(range(0, 16, 2), 8)]
        recorder = StubJudge(pair_judge())
        score(recorder.url, "llm_judge_pairwise", rows, mode="tournament", pattern="all_pairs_one_way")
        bodies = [r["body"] for r in recorder.requests]
        recorder.close()

        async def raw() -> float:
            sem = asyncio.Semaphore(concurrency)
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
                async def one(body: dict[str, Any]) -> None:
                    async with sem, session.post(url + "/v1/chat/completions", json=body) as resp:
                        json.loads(await resp.text())["choices"][0]["message"]["content"]

                await asyncio.gather(*(one(b) for b in bodies[:32]))  # warm
                start = time.perf_counter()
                await asyncio.gather(*(one(b) for b in bodies))
                return time.perf_counter() - start

        raws, judged, cpu = [], [], [0.0, 0.0]
        kw = {"base_url": url + "/v1", "model": "m", "mode": "tournament", "pattern": "all_pairs_one_way",
              "max_in_flight": concurrency}
        term = {"name": "llm_judge_pairwise", "kwargs": kw, "max_concurrency": groups}
        with Runner.from_config({"rewards": [term]}) as runner:
            runner.score([{"prompt": "warm", "response": f"q={x}", "extra_info": {"uid": "w"}}
                          for x in (1, 2)])
            for _ in range(5):
                c = time.process_time()
                raws.append(asyncio.run(raw()))
                cpu[0] += time.process_time() - c
                _call._CACHE.clear()
                start, c = time.perf_counter(), time.process_time()
                res = runner.score(rows)
                judged.append(time.perf_counter() - start)
                cpu[1] += time.process_time() - c
                assert not any(res.errors), res.errors[:1]
        r, j = min(raws), min(judged)
        print(f"overhead, {len(bodies)} calls at {service_ms:g} ms, {concurrency} in flight: raw {r:.3f}s, "
              f"judge {j:.3f}s (best of 5): +{100 * (j / r - 1):.1f} % (goal <= 10 %); client CPU a call: "
              f"raw {1000 * cpu[0] / 5 / len(bodies):.3f} ms, judge {1000 * cpu[1] / 5 / len(bodies):.3f} ms")
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=1000)
    ap.add_argument("--groups", type=int, default=40)
    ap.add_argument("--service-ms", type=float, default=20.0)
    args = ap.parse_args()
    import tempfile

    stub = StubJudge()
    try:
        position(stub, args.pairs)
        tournament(stub, args.groups)
        rubric(stub)
        with tempfile.TemporaryDirectory() as tmp:
            calibration(stub, tmp)
        failures(stub)
    finally:
        stub.close()
    overhead(args.service_ms, args.groups)


if __name__ == "__main__":
    main()
