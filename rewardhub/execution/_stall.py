"""Which reward calls are running in this process, on which sample and since when: read from the
stacks of the threads that run them, so that nothing is recorded per call (scoring pays nothing for
it). ``rewardhub score`` uses it to name a call that runs long where no ``timeout_s`` bounds it.

Seen: the inline executor (the fast loop of plain rewards too), the thread executor, and the asyncio
executor without a timeout; not the process and Ray executors, whose calls run in other processes.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

__all__ = ["StallWatch", "calls_running"]


def _codes() -> dict[str, Any]:
    from . import _async
    from . import _fast
    from . import _local
    from . import runner

    return {"fast": _fast._run_fast.__code__, "inline": _local.run_inline.__code__,
            "threads": _local.run_threads.__code__, "async": _async.run_async.__code__,
            "local": runner.Runner._run_local.__code__}


def calls_running() -> list[tuple[str, int, float]]:
    """``(reward term, sample, seconds running)`` of each reward call running now (as far as the
    stacks tell: see the module's text); the sample is its position in the batch the runner got."""
    codes, now, out = _codes(), time.perf_counter(), []
    for top in sys._current_frames().values():
        f: FrameType | None = top
        while f is not None:
            code = f.f_code
            if code is codes["fast"]:
                loc = f.f_locals
                out.append((loc["name"], loc["col"].label(len(loc["out"])), now - loc["ends"][-1]))
                break
            caller = f.f_back
            if caller is not None and caller.f_code is codes["local"] and code in (
                    codes["inline"], codes["threads"], codes["async"]):
                out.extend(_in_local(code, codes, f.f_locals, caller.f_locals, now))
                break
            f = caller
    return out


def _in_local(code: Any, codes: dict[str, Any], loc: dict[str, Any], caller: dict[str, Any],
              now: float) -> list[tuple[str, int, float]]:
    """The calls running in ``Runner._run_local`` (``caller``'s locals) on one of the local executors."""
    term, idx, col = caller["term"], caller["idx"], caller["col"]
    units = caller.get("units")

    def sample(k: int) -> int:
        return int(col.label(idx[k] if units is None else units[k][0]))

    name = term.name
    if code is codes["inline"]:
        began = loc.get("began")
        return [] if began is None else [(name, sample(len(loc["out"])), now - began)]
    running = []
    if code is codes["threads"]:
        for slot in list(loc.get("slots") or ()):
            began, batch, pos = slot.began, slot.batch, slot.pos
            if began is not None and pos < len(batch):
                running.append((name, sample(batch[pos]), time.monotonic() - began))
        return running
    run = loc.get("run")
    for slot in list(run.slots if run is not None else ()):
        began, i = slot.began, slot.index
        if began is not None and i is not None:
            running.append((name, sample(i), now - began))
    return running


class StallWatch:
    """A daemon thread that says (``say``) when a reward call has run ``after_s`` seconds, and again
    each time its running time doubles: ``still waiting on reward 'x' for row N, 60 s``.

    :param offset: the position of the runner's batch in the run (rows are numbered from the run's
        first): read each time it looks.
    """

    def __init__(self, after_s: float, say: Callable[[str], None],
                 offset: Callable[[], int] = lambda: 0) -> None:
        self.after_s, self._say, self._offset = after_s, say, offset
        self._stop = threading.Event()
        self._told: dict[tuple[str, int], float] = {}  # (term, row) -> the running time told last
        self._thread = threading.Thread(target=self._run, name="rewardhub-stall-watch", daemon=True)

    def __enter__(self) -> StallWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()

    def _run(self) -> None:
        step = max(0.05, min(5.0, self.after_s / 4))
        while not self._stop.wait(step):
            try:
                running = calls_running()
            except Exception:  # noqa: BLE001 - a stack read while it changed: look again next time
                continue
            offset = self._offset()
            for name, i, seconds in running:
                key = (name, offset + i)
                last = self._told.get(key)
                if seconds >= self.after_s and (last is None or seconds >= 2 * last):
                    self._told[key] = seconds
                    self._say(f"still waiting on reward {name!r} for row {offset + i}, {seconds:.0f} s (it "
                              "has no timeout_s: set one to bound its calls)")
