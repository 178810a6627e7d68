"""When a pool worker's running call is stuck, and whether it waits (sleep, I/O) or computes.

The process pool learns each reward's mean call time; a call that runs many times longer is
"stuck", and a stuck call that waits can have a spare worker stand in for its worker at once.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._worker import Worker

__all__ = ["Watch"]

#: a call is "stuck" after this many times the reward's mean call time (within the bounds below)
_STUCK_FACTOR = 30.0
_STUCK_MIN_S = 0.025
#: a worker whose call has run this many times the mean call time (at least _LOOK_MIN_S) is looked
#: at: asleep at two looks _PROBE_S apart, with no CPU used between them, it waits (sleep, I/O)
#: rather than computes, and is stuck at once
_LOOK_FACTOR = 3.0
_LOOK_MIN_S = 0.001
_PROBE_S = 0.001
#: a worker that computes is looked at again after this, doubling up to _LOOK_MAX_S
_LOOK_MAX_S = 0.05


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class Watch:
    """The pool's watch over its workers: each reward's running mean call time, and from it when
    a worker's running call is stuck and when to look at it next.

    :param stuck_after_s: a call running longer than this (or 30 times the reward's mean call
        time, if less; at least 25 ms) is stuck.
    """

    def __init__(self, stuck_after_s: float) -> None:
        self.stuck_after_s = stuck_after_s
        self._latency: dict[str, float] = {}  # per key: running mean seconds per call

    def mean(self, key: str) -> float | None:
        """The mean seconds per call of ``key`` so far; ``None`` before its first answer."""
        return self._latency.get(key)

    def record(self, key: str, latency: float) -> None:
        est = self._latency.get(key)
        self._latency[key] = latency if est is None else 0.8 * est + 0.2 * latency

    def stuck_after(self, w: Worker) -> float:
        est = self._latency.get(w.inflight[0].key) if w.inflight else None
        if est is None:
            return self.stuck_after_s
        return min(self.stuck_after_s, max(_STUCK_MIN_S, _STUCK_FACTOR * est))

    def stuck(self, w: Worker, now: float) -> bool:
        return bool(w.inflight) and (w.idle is True or now - w.started > self.stuck_after(w))

    def _look_after(self, w: Worker) -> float:
        est = self._latency.get(w.inflight[0].key)
        first = self.stuck_after_s if est is None else max(_LOOK_MIN_S, _LOOK_FACTOR * est)
        return min(first, self.stuck_after(w))

    def look(self, w: Worker, now: float) -> None:
        """Tell a long call that waits (sleep, I/O: its worker can be stood in for at once) from
        one that computes. Waiting = asleep at two looks :data:`_PROBE_S` apart with under 10 % of
        a CPU used between them; where ``/proc`` says nothing, a stuck call counts as waiting."""
        if not w.inflight or w.idle is not None or now < w.next_look:
            return
        first_look = w.started + self._look_after(w)
        if now < first_look:
            w.next_look = first_look
            return
        cpu, state = w.cpu_s(), w.state()
        if cpu is None or state is None:
            if self.stuck(w, now):
                w.idle = True
            else:
                w.next_look = w.started + self.stuck_after(w)
            return
        asleep = state in ("S", "D")
        if w.probe is not None and asleep and w.probe[2]:
            if (cpu - w.probe[1]) / max(now - w.probe[0], 1e-9) < 0.1:
                w.idle = True
                return
        last = w.probe[0] if w.probe is not None else w.started
        w.probe = (now, cpu, asleep)
        w.next_look = now + (_PROBE_S if asleep else min(_LOOK_MAX_S, max(_PROBE_S, now - last)))

    def want_spare(self, workers: Sequence[Worker], size: int, now: float) -> bool:
        """Whether a spare worker would help: one is stuck, and a spare would not just fight it for a core.

        A stuck worker that waits is stood in for at once; one that computes (maybe a slow first
        call that builds caches) only when there are more cores than workers computing.
        """
        active, computing = 0, 0
        for w in workers:
            if not self.stuck(w, now):
                active += 1
            elif not w.idle:
                computing += 1
        return active < size and active + computing < _cpus()
