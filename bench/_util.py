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


def ensure_bytecode() -> str:
    """Compile the repository's packages to bytecode (``__pycache__``, git-ignored), as any install
    does (pip compiles at install; an editable install writes it on first import). Where
    ``PYTHONDONTWRITEBYTECODE`` is set (this project's shared host sets it), nothing would ever
    write it, and every run of a timed command would compile rewardhub's modules from source
    again, while the stdlib and site-packages it is compared with load theirs. Returns a note."""
    import compileall

    for folder in ("rewardhub", "plugins", "trainer"):
        compileall.compile_dir(os.path.join(REPO, folder), quiet=1)
    return ("bytecode compiled first (PYTHONDONTWRITEBYTECODE is set here)"
            if os.environ.get("PYTHONDONTWRITEBYTECODE") else "bytecode compiled first")


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
