"""Make a JSONL file of math samples (prompt, response, ground_truth, ...) from reasoning-gym.

Responses are written the ways models write them: a boxed answer, "Answer: N", a wrong number,
LaTeX fractions, GSM8K-style golds, and no answer at all. Deterministic for a given --seed.

    python examples/make_samples.py -n 3000 -o samples.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from fractions import Fraction


def samples(n: int, seed: int = 0) -> list[dict]:
    import reasoning_gym

    rng = random.Random(seed)
    data = reasoning_gym.create_dataset("basic_arithmetic", size=n, seed=seed)
    out = []
    for i, entry in enumerate(data):
        gold = entry["answer"]
        value = Fraction(gold)
        style = rng.choice(["boxed", "answer", "wrong", "latex", "gsm8k", "none", "boxed", "answer"])
        if style == "boxed":
            response = (
                f"Let me compute: {entry['metadata']['expression']}. So the result is \\boxed{{{gold}}}."
            )
        elif style == "answer":
            response = f"Working it out step by step gives {gold}.\nAnswer: {gold}"
        elif style == "wrong":
            response = f"I think the answer is \\boxed{{{value + rng.choice([-2, -1, 1, 3])}}}."
        elif style == "latex":
            response = (
                f"The value is $\\frac{{{value * 2}}}{{2}}$, i.e. \\boxed{{\\frac{{{value * 4}}}{{4}}}}"
            )
        elif style == "gsm8k":
            response = f"{entry['metadata']['expression']} = {gold}"
            gold = f"We evaluate the expression.\n#### {gold}"
        else:
            response = "I am not sure how to solve this."
        out.append({
            "prompt": entry["question"],
            "response": response,
            "ground_truth": gold,
            "data_source": "basic_arithmetic",
            "extra_info": {"index": i, "style": style},
        })
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("-o", "--output", default="-")
    a = ap.parse_args()
    f = sys.stdout if a.output == "-" else open(a.output, "w", encoding="utf-8")
    for row in samples(a.n, a.seed):
        f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
