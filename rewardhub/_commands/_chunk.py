"""One chunk of ``rewardhub score``, scored so that what was paid for is kept when the run stops.

While a chunk is scored, a signal (Ctrl-C, SIGTERM, SIGHUP) does not break into the reward calls: it
stops the scoring (no new call starts: :class:`~rewardhub.execution.Cancel`; the calls in flight end),
and the rows that every term had scored go to ``keep`` (the ``.partial`` output; a term with ``cache``
on has stored its answers) before :class:`~rewardhub.Interrupted` goes on. A second signal, or
:data:`STOP_WAIT_S` seconds with a call still running, stops at once (the chunk's rows not written yet
are then lost). The rewards run on the main thread as before (a reward's own ``signal.alarm`` works).
A remote scorer whose server fails mid-chunk hands over the rows of the requests it answered the same
way.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from ..errors import Interrupted
from ..errors import RewardhubError
from ..execution import Scorer
from ..scoring import Scored
from ..scoring import score_rows
from ..scoring import scored_before_stop

__all__ = ["STOP_WAIT_S", "score_chunk"]

#: rows (their place in the chunk) with their results
Kept = list[tuple[int, dict[str, Any]]]
#: seconds a stopped run waits for the reward calls in flight (a hung one would hold it for ever)
STOP_WAIT_S = 5.0


def score_chunk(scorer: Scorer, samples: Sequence[Any], skip: Mapping[int, Mapping[str, str]], *,
                progress: Any, indices: Sequence[int], keep: Callable[[Kept], None]) -> Scored:
    """:func:`~rewardhub.scoring.score_rows` of ``samples``; where it stops before the end (a signal, a
    remote server's failure), ``keep`` gets the rows already scored before the exception goes on."""
    if not scorer.cancels or threading.current_thread() is not threading.main_thread():
        try:
            return score_rows(scorer, samples, skip, progress=progress, indices=indices)
        except RewardhubError as exc:
            answered = getattr(exc, "answered", None)  # a remote scorer's rows scored before it failed
            if answered:
                keep(sorted(answered.items()))
            raise
    from ..execution import Cancel

    cancel = Cancel()
    stopped: list[str] = []
    timer: list[threading.Timer] = []

    def on_signal(signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if stopped:  # a second signal, or the calls in flight took too long: at once
            raise Interrupted(stopped[0])
        stopped.append(name)
        cancel.set()
        say(f"stopping: no new reward call starts; waiting up to {STOP_WAIT_S:g}s for the calls in flight "
             "to end, to keep their rows (Ctrl-C again: stop now)")
        hurry = threading.Timer(STOP_WAIT_S, os.kill, (os.getpid(), signum))
        hurry.daemon = True
        hurry.start()
        timer.append(hurry)

    old = _catch(on_signal)
    try:
        try:
            scored = score_rows(scorer, samples, skip, progress=progress, indices=indices, cancel=cancel)
        except RewardhubError:
            if not stopped:
                raise
            keep(scored_before_stop(scorer, len(samples), skip, cancel.kept))
            raise Interrupted(stopped[0]) from None
    finally:
        for hurry in timer:
            hurry.cancel()
        for sig, handler in old.items():
            signal.signal(sig, handler)
    if stopped:  # the signal came with the chunk's last call: every row is scored
        keep(list(enumerate(scored.results)))
        raise Interrupted(stopped[0])
    return scored


def _catch(handler: Any) -> dict[int, Any]:
    """``handler`` for SIGINT, SIGTERM and SIGHUP (each not ignored); the handlers it replaced."""
    old: dict[int, Any] = {}
    for sig in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)):
        if sig is None or signal.getsignal(sig) in (signal.SIG_IGN, None):
            continue
        old[sig] = signal.signal(sig, handler)
    return old


def say(line: str) -> None:
    """``line`` on stderr, if there still is one (a closed terminal's, after SIGHUP, is gone)."""
    try:
        print(line, file=sys.stderr, flush=True)
    except OSError:
        pass
