"""Deterministic graders through rewardhub against a plain loop calling the same library (issue 46 §5).

    python bench/bench_graders.py [N]

Scores N generated (item, sample) pairs with a ``string_check`` and a ``text_similarity`` ``fuzzy_match``
grader term through ``Runner.score`` (templating, the reward call, the result rows), and with a plain loop
(``==`` / ``rapidfuzz.fuzz.WRatio``) on the same pairs; prints samples/s of both and their ratio. The
issue asks for >= 5,000 samples/s on 2 cores for both graders.
"""

from __future__ import annotations

import random
import sys
import time

from rewardhub.execution import Runner

OUT, REF = "{{ sample.output_text }}", "{{ item.answer }}"
GRADERS = {
    "string_check": {"type": "string_check", "name": "s", "input": OUT, "reference": REF, "operation": "eq"},
    "fuzzy_match": {
        "type": "text_similarity",
        "name": "f",
        "input": OUT,
        "reference": REF,
        "evaluation_metric": "fuzzy_match",
        "pass_threshold": 0.8,
    },
}


def pairs(n: int) -> list[tuple[str, str]]:
    rnd = random.Random(0)
    words = "the answer is forty two Paris London a b c".split()
    return [
        (" ".join(rnd.choices(words, k=rnd.randint(1, 12))), " ".join(rnd.choices(words, k=3)))
        for _ in range(n)
    ]


def plain(kind: str, data: list[tuple[str, str]]) -> list[float]:
    if kind == "string_check":
        return [1.0 if t == r else 0.0 for t, r in data]
    from rapidfuzz import fuzz
    from rapidfuzz import utils

    return [fuzz.WRatio(t, r, processor=utils.default_process) / 100.0 for t, r in data]


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    data = pairs(n)
    rows = [{"response": t, "extra_info": {"answer": r}} for t, r in data]
    print(f"{n:,} pairs; rates in samples/s (best of 3)")
    for kind, spec in GRADERS.items():
        with Runner.from_config({"rewards": [{"grader": spec}]}) as runner:
            runner.score(rows[:100])  # warm: libraries imported, grader compiled
            best_rh = best_plain = float("inf")
            for _ in range(3):
                t0 = time.perf_counter()
                res = runner.score(rows)
                best_rh = min(best_rh, time.perf_counter() - t0)
                t0 = time.perf_counter()
                want = plain(kind, data)
                best_plain = min(best_plain, time.perf_counter() - t0)
        assert [round(s, 12) for s in res.scores] == [round(w, 12) for w in want], "scores differ"
        rate, base = n / best_rh, n / best_plain
        print(
            f"{kind:13s} rewardhub {rate:10,.0f}/s   plain loop {base:12,.0f}/s   ratio {rate / base:.2g}"
            f"   {'>= 5,000/s: ok' if rate >= 5000 else 'UNDER 5,000/s'}"
        )


if __name__ == "__main__":
    main()
