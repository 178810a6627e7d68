"""Write examples/arithmetic_val.jsonl: the demo's held-out validation prompts.

reasoning-gym ``basic_arithmetic`` with the demo's kwargs but another seed (1), keeping only
questions that are not among the 500 training prompts (seed 0) of examples/arithmetic.yaml, so
that ``val/score`` measures answers to prompts the model never trained on. Deterministic.

    .venv/bin/python examples/make_arithmetic_val.py [-n 64]
"""

from __future__ import annotations

import argparse
import json
import os

KWARGS = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}
TRAIN = {"size": 500, "seed": 0}


def rows(n: int) -> list[dict]:
    import reasoning_gym

    seen = {e["question"] for e in reasoning_gym.create_dataset("basic_arithmetic", **TRAIN, **KWARGS)}
    out = []
    for e in reasoning_gym.create_dataset("basic_arithmetic", size=20 * n, seed=1, **KWARGS):
        if e["question"] in seen:
            continue
        seen.add(e["question"])
        out.append({"prompt": e["question"], "ground_truth": str(e["answer"]),
                    "data_source": "reasoning_gym/basic_arithmetic"})
        if len(out) == n:
            break
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("-o", "--output", default=os.path.join(os.path.dirname(__file__), "arithmetic_val.jsonl"))
    a = ap.parse_args()
    with open(a.output, "w", encoding="utf-8") as f:
        for row in rows(a.n):
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
