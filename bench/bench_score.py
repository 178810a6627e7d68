"""`rewardhub score` with math_verify on 3,000 samples (process executor, 2 workers) vs a plain loop.

The baseline is the way verl's naive reward manager scores: one process, math-verify called on each
sample in turn. ``rewardhub score`` is always timed whole (start-up, reading, scoring, writing). The
baseline is printed two ways: its whole run (start-up included), and its loop alone (start-up, i.e.
the imports, excluded: issue 20's definition, the one the goal is stated against). Also checks that
every score agrees. Goal on 2 cores (issue 20): >= 2.0x against the loop alone. A third line runs
rewardhub-math's own ``math_verify`` (the reward ``score`` calls, with its plain-number fast path) in
the same loop: what the process pool itself adds, apart from the reward's own speed.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

from _util import ensure_bytecode
from make_samples import samples

BASELINE = r"""
import json, re, sys, time
from math_verify import parse, verify
# rewardhub-math's gold normalisation, written out: the baseline is plain math-verify, nothing of rewardhub
def extract_gold(ground_truth):
    if isinstance(ground_truth, (list, tuple)):
        ground_truth = ground_truth[0] if ground_truth else ""
    text = str(ground_truth).strip()
    m = re.search(r"####\s*(.+?)\s*$", text, re.DOTALL)
    return m.group(1).replace(",", "").strip() if m else text
t0 = time.perf_counter()
out = []
for line in open(sys.argv[1]):
    row = json.loads(line)
    gold_text = extract_gold(row["ground_truth"])
    gold = parse("$" + gold_text + "$", parsing_timeout=None) or parse(gold_text, parsing_timeout=None)
    pred = parse(row["response"], parsing_timeout=None)
    out.append(1.0 if pred and verify(gold, pred, timeout_seconds=None) else 0.0)
json.dump(out, open(sys.argv[2], "w"))
print(time.perf_counter() - t0)  # the loop alone (reading and scoring), start-up excluded
"""


REWARD_LOOP = r"""
import json, sys, time
from rewardhub_math.reward import math_verify
t0 = time.perf_counter()
out = [math_verify(response=row["response"], ground_truth=row["ground_truth"])["score"]
       for row in map(json.loads, open(sys.argv[1]))]
json.dump(out, open(sys.argv[2], "w"))
print(time.perf_counter() - t0)
"""


def _timed(cmd: list[str]) -> tuple[float, float, str]:
    """Wall and CPU seconds (user + system, the command and its children) of one run, and its stdout."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run(cmd, check=True, capture_output=True, text=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), proc.stdout


def main(n: int = 3000, repeat: int = 3) -> None:
    if not os.environ.get("BENCH_NO_BYTECODE"):
        print(ensure_bytecode())
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
            f.write(BASELINE)
        base_cmd = [sys.executable, script, data, os.path.join(d, "base.json")]
        reward_script = os.path.join(d, "reward_loop.py")
        with open(reward_script, "w") as f:
            f.write(REWARD_LOOP)
        reward_cmd = [sys.executable, reward_script, data, os.path.join(d, "reward.json")]
        ours_cmd = [sys.executable, "-m", "rewardhub", "score", cfg, data, "-o", os.path.join(d, "out.jsonl"),
                    "--no-progress"]
        base, ours, same_fn = [], [], []
        for _ in range(repeat):  # alternate, so that load from elsewhere hits all alike
            base.append(_timed(base_cmd))
            ours.append(_timed(ours_cmd))
            same_fn.append(_timed(reward_cmd))
        base_scores = json.load(open(os.path.join(d, "base.json")))
        our_scores = [
            json.loads(line)["rewards"]["math_verify"] for line in open(os.path.join(d, "out.jsonl"))
        ]
        disagree = sum(a != b for a, b in zip(base_scores, our_scores)) + abs(
            len(base_scores) - len(our_scores)
        )
        disagree += sum(a != b for a, b in zip(base_scores, json.load(open(os.path.join(d, "reward.json")))))
        r_loop = statistics.median(float(out) for _, _, out in same_fn)
        b_wall, o_wall = min(w for w, _, _ in base), min(w for w, _, _ in ours)
        b_loop = min(float(out) for _, _, out in base)
        b_med, o_med = statistics.median(w for w, _, _ in base), statistics.median(w for w, _, _ in ours)
        b_loop_med = statistics.median(float(out) for _, _, out in base)
        print(
            f"math_verify on {n} samples, best of {repeat} (alternating runs):\n"
            f"  sequential loop, whole run     {b_wall:.2f}s ({n / b_wall:.0f}/s), CPU "
            f"{min(c for _, c, _ in base):.2f}s\n"
            f"  sequential loop, loop alone    {b_loop:.2f}s ({n / b_loop:.0f}/s) (start-up excluded)\n"
            f"  rewardhub score (x2), whole    {o_wall:.2f}s ({n / o_wall:.0f}/s), CPU "
            f"{min(c for _, c, _ in ours):.2f}s\n"
            f"  speed-up vs the loop alone (issue 20's baseline): {b_loop / o_wall:.2f}x best, "
            f"{b_loop_med / o_med:.2f}x median (goal >= 2.0x)\n"
            f"  speed-up vs the whole loop run (start-up in both): {b_wall / o_wall:.2f}x best, "
            f"{b_med / o_med:.2f}x median\n"
            f"  rewardhub-math's math_verify in the same loop: {r_loop:.2f}s median (loop alone); "
            f"score vs it: {r_loop / o_med:.2f}x median (the pool's own share)\n"
            f"  scores that differ: {disagree} of {len(our_scores)}; mean "
            f"{sum(our_scores) / len(our_scores):.3f}; "
            f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
        )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3000)
