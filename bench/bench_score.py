"""`rewardhub score` with math_verify on 3,000 samples (process executor, 2 workers) vs a plain loop.

The baseline is the way verl's naive reward manager scores: one process, math-verify called on each
sample in turn. Both include start-up (imports). Also checks that every score agrees.
Goal on 2 cores: >= 1.5x.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

from _util import REPO

from make_samples import samples

BASELINE = r"""
import json, sys, time
t0 = time.perf_counter()
from math_verify import parse, verify
sys.path.insert(0, {plugin!r})
from rewardhub_math.reward import extract_gold
out = []
for line in open(sys.argv[1]):
    row = json.loads(line)
    gold_text = extract_gold(row["ground_truth"])
    gold = parse("$" + gold_text + "$", parsing_timeout=None) or parse(gold_text, parsing_timeout=None)
    pred = parse(row["response"], parsing_timeout=None)
    out.append(1.0 if pred and verify(gold, pred, timeout_seconds=None) else 0.0)
json.dump(out, open(sys.argv[2], "w"))
"""


def main(n: int = 3000) -> None:
    with tempfile.TemporaryDirectory() as d:
        data = os.path.join(d, "data.jsonl")
        with open(data, "w") as f:
            for row in samples(n, seed=1):
                f.write(json.dumps(row) + "\n")
        cfg = os.path.join(d, "cfg.yaml")
        with open(cfg, "w") as f:
            f.write("reward:\n  rewards:\n    - name: math_verify\n      executor: process\n"
                    "      max_concurrency: 2\n      timeout_s: 10\n")
        script = os.path.join(d, "baseline.py")
        with open(script, "w") as f:
            f.write(BASELINE.format(plugin=os.path.join(REPO, "plugins", "rewardhub-math")))
        t = time.perf_counter()
        subprocess.run([sys.executable, script, data, os.path.join(d, "base.json")], check=True,
                       capture_output=True)
        base = time.perf_counter() - t
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "rewardhub", "score", cfg, data, "-o", os.path.join(d, "out.jsonl"),
                        "--no-progress"], check=True, capture_output=True)
        ours = time.perf_counter() - t
        base_scores = json.load(open(os.path.join(d, "base.json")))
        our_scores = [json.loads(line)["rewards"]["math_verify"] for line in open(os.path.join(d, "out.jsonl"))]
        disagree = sum(a != b for a, b in zip(base_scores, our_scores))
        print(f"math_verify on {n} samples: sequential loop {base:.2f}s ({n / base:.0f}/s), "
              f"rewardhub score (process x2) {ours:.2f}s ({n / ours:.0f}/s) -> speed-up {base / ours:.2f}x "
              f"(goal >= 1.5x); scores that differ: {disagree} of {len(our_scores)}; mean "
              f"{sum(our_scores) / len(our_scores):.3f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3000)
