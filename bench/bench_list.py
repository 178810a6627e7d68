"""`rewardhub list --json` wall time as a ratio of `python -c pass` (goal <= 3x, issue 20), and
registry.get().

Also the CPU time (user + system) ratio: on a loaded host wall times mostly measure the wait for a core.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
import timeit

from _util import cpu
from _util import ensure_bytecode
from _util import report
from _util import wall

from rewardhub.registry import build_registry
from rewardhub.testing import write_distribution


def main() -> None:
    if not os.environ.get("BENCH_NO_BYTECODE"):
        print(ensure_bytecode())
    base = wall([sys.executable, "-c", "pass"])
    t = wall([sys.executable, "-m", "rewardhub", "list", "--json"])
    report("rewardhub list --json (first-party plugins)", t, base, goal="<= 3x")
    report(
        "  CPU time",
        cpu([sys.executable, "-m", "rewardhub", "list", "--json"]),
        cpu([sys.executable, "-c", "pass"]),
        goal="<= 3x",
    )
    with tempfile.TemporaryDirectory() as d:
        for i in range(200):
            write_distribution(
                d,
                f"gen-reward-{i}",
                "1.0",
                {"rewardhub.rewards": {f"gen_{i}": f"gen_mod_{i}:score"}},
                {f"gen_mod_{i}": f"def score(**kw):\n    '''Generated reward {i}.'''\n    return 1.0\n"},
            )
        t200 = wall([sys.executable, "-m", "rewardhub", "list", "--json"], env={"PYTHONPATH": d})
        report("rewardhub list --json (+200 entry points)", t200, base, goal="<= 3x")
    with tempfile.TemporaryDirectory() as d:  # python -m puts the current directory on sys.path
        times = []
        for i in range(8):  # each run in a folder a command has just written to, as `score -o` does
            with open(os.path.join(d, f"out-{i}.jsonl"), "w") as f:
                f.write("{}\n")
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "rewardhub", "list", "--json"], cwd=d, capture_output=True,
                           check=True)
            times.append(time.perf_counter() - t0)
        report("rewardhub list --json (current directory written to between runs)",
               statistics.median(times[1:]), base, goal="<= 3x")
    reg = build_registry()
    n = 1_000_000
    per = timeit.timeit(lambda: reg.get_reward("math_verify"), number=n) / n
    empty = timeit.timeit(lambda: None, number=n) / n
    print(f"registry.get(name): {per * 1e6:.3f} us per call (empty lambda call {empty * 1e6:.3f} us; "
          f"ratio {per / empty:.2f}x) (goal <= 2 us)")


if __name__ == "__main__":
    main()
