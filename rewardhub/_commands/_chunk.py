"""One chunk of ``rewardhub score``, scored so that what was paid for is kept when the run stops.

The chunk is scored on a thread of its own while the main thread waits for it; a signal (Ctrl-C,
SIGTERM, SIGHUP) reaches the main thread, which then stops the scoring (no new call starts:
:class:`~rewardhub.execution.Cancel`; the calls in flight are waited for up to :data:`STOP_WAIT_S`)
and hands the rows that every term had scored to ``keep`` (they go to the ``.partial`` output; a term
with ``cache`` on has stored its answers) before the signal's exception goes on. A remote scorer whose
server fails mid-chunk hands over the rows of the requests it answered the same way. Terms on Ray are
scored on the main thread (Ray starts there).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from ..errors import RewardhubError
from ..scoring import Scored
from ..scoring import score_rows
from ..scoring import scored_before_stop

__all__ = ["score_chunk"]

#: rows (their place in the chunk) with their results
Kept = list[tuple[int, dict[str, Any]]]
#: seconds a stopped run waits for the reward calls in flight (a hung one would hold it for ever)
STOP_WAIT_S = 5.0


def score_chunk(scorer: Any, samples: Sequence[Any], skip: Mapping[int, Mapping[str, str]], *,
                progress: Any, indices: Sequence[int], keep: Callable[[Kept], None]) -> Scored:
    """:func:`~rewardhub.scoring.score_rows` of ``samples``; where it stops before the end (a signal, a
    remote server's failure), ``keep`` gets the rows already scored before the exception goes on."""
    local = hasattr(scorer, "aggregation") and not any(
        getattr(t.policy, "executor", None) == "ray" for t in scorer.terms)
    if not local:
        try:
            return score_rows(scorer, samples, skip, progress=progress, indices=indices)
        except RewardhubError as exc:
            answered = getattr(exc, "answered", None)  # a remote scorer's rows scored before it failed
            if answered:
                keep(sorted(answered.items()))
            raise
    from ..execution import Cancel
    from ..execution import signals_never_reach_here

    cancel = Cancel()
    box: dict[str, Any] = {}
    # an Event, not Thread.join: a join that a signal interrupts can take the thread for ended
    finished = threading.Event()

    def work() -> None:
        signals_never_reach_here()
        try:
            box["scored"] = score_rows(scorer, samples, skip, progress=progress, indices=indices,
                                       cancel=cancel)
        except BaseException as exc:  # noqa: BLE001 - raised again in the main thread
            box["error"] = exc
        finally:
            finished.set()

    threading.Thread(target=work, name="rewardhub-score", daemon=True).start()
    try:
        while not finished.wait(0.25):
            pass
    except BaseException:  # the user stopped the run: no new call starts, the calls in flight end
        cancel.set()
        if not finished.is_set():
            _say(f"stopping: no new reward call starts; waiting up to {STOP_WAIT_S:g}s for the calls in "
                 "flight to end, to keep their rows (Ctrl-C again: stop now)")
        try:
            until = time.monotonic() + STOP_WAIT_S
            while not finished.wait(0.25):
                if time.monotonic() > until:
                    _say(f"stopping: a reward call still runs after {STOP_WAIT_S:g}s; the rows of its chunk "
                         "not written yet are not kept")
                    break
        finally:  # (a second signal stops the waiting: what was scored by then is kept)
            scored = box.get("scored")
            keep(list(enumerate(scored.results)) if scored is not None else
                 scored_before_stop(scorer, len(samples), skip, cancel.kept))
        raise
    if "error" in box:
        raise box["error"]
    result: Scored = box["scored"]
    return result


def _say(line: str) -> None:
    import sys

    try:
        print(line, file=sys.stderr, flush=True)
    except OSError:  # no terminal any more (SIGHUP)
        pass
