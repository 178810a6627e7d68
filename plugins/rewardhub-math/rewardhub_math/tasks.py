"""Task ``math.arithmetic``: arithmetic questions generated locally (seeded), scored by ``math_verify``."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

__all__ = ["ARITHMETIC"]


def _rows(size: int, seed: int) -> Iterator[dict[str, Any]]:
    rng = random.Random(seed)
    for _ in range(size):
        a, b, c = rng.randint(2, 99), rng.randint(2, 99), rng.randint(2, 9)
        op = rng.choice("+-*")
        value = {"+": a + b, "-": a - b, "*": a * b}[op] * c
        yield {"prompt": f"What is ({a} {op} {b}) * {c}? Put the final answer in \\boxed{{}}.",
               "ground_truth": str(value), "extra_info": {"expression": f"({a} {op} {b}) * {c}"}}


#: the task (a plain mapping: the entry point needs nothing of rewardhub)
ARITHMETIC: dict[str, Any] = {
    "name": "math.arithmetic", "reward": "math_verify", "rows": _rows, "size": 100, "ability": "math",
    "summary": "two-step integer arithmetic, generated with --size and --seed",
}
