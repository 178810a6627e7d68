"""Small helpers shared by the benchmarks."""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "examples"))


def wall(cmd: Sequence[str], repeat: int = 7, env: dict[str, str] | None = None) -> float:
    """Median wall time of a command over ``repeat`` runs (after one warm-up)."""
    full = dict(os.environ, **(env or {}))
    subprocess.run(cmd, capture_output=True, env=full, check=True)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        subprocess.run(cmd, capture_output=True, env=full, check=True)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def cpu(cmd: Sequence[str], repeat: int = 7, env: dict[str, str] | None = None) -> float:
    """Median CPU seconds (user + system) of a command over ``repeat`` runs (after one warm-up):
    steadier than wall time on a loaded host, where waiting for a core is not the command's cost."""
    full = dict(os.environ, **(env or {}))
    subprocess.run(cmd, capture_output=True, env=full, check=True)
    times = []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(cmd, capture_output=True, env=full, check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        times.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
    return statistics.median(times)


def report(name: str, value: float, baseline: float, unit: str = "s", goal: str = "") -> None:
    ratio = value / baseline if baseline else float("nan")
    print(f"{name}: {value:.4f}{unit} vs baseline {baseline:.4f}{unit} -> ratio {ratio:.2f}x" +
          (f"  (goal {goal})" if goal else ""))
