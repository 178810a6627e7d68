"""The server's process against its rewards: a reward's ``os._exit`` fails its sample, not the server,
and Ray's signal handler does not take SIGTERM from the drain.

On the inline and thread executors a reward runs in the server's own process, on one of its threads;
``os._exit`` there would end the server at once, every client's connection cut and nothing in the log
(``sys.exit`` already fails only the sample: :func:`rewardhub.execution.reward_exit`). While
:func:`exits_fail_the_sample` is in force, ``os._exit`` called on a thread that runs rewards
(:data:`REWARD_THREADS`) raises :class:`RewardExited` (a ``SystemExit``) there instead: the sample
fails with that error, and one ``WARNING:`` line names the function that called it. Anywhere else
(the main thread, another thread, a forked worker process) ``os._exit`` ends the process as before.

A crash in native code (a segfault, an abort) cannot be caught like that; :mod:`faulthandler` then
writes every thread's Python stack to stderr, the reward's call among them, before the process ends.

:func:`keep_stop_signals` takes SIGTERM and SIGINT back from Ray (:func:`reclaim_stop_signals`), so
that a server with ``executor: ray`` terms drains and exits 0 on SIGTERM.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import sys
import threading
import traceback
from collections.abc import Iterator
from typing import Any

__all__ = ["RECLAIM_EVERY_S", "REWARD_THREADS", "RewardExited", "exits_fail_the_sample", "keep_stop_signals",
           "reclaim_stop_signals"]

#: the name prefixes of the threads rewards run on in the server's process: the batcher's Runner
#: calls (inline executor), the thread executor's workers, a sync caller's own loop for async rewards
REWARD_THREADS = ("rewardhub-score", "rewardhub-reward", "rewardhub-async")


class RewardExited(SystemExit):
    """``os._exit(code)`` called by a reward on a server's reward thread (fails its sample)."""


@contextlib.contextmanager
def exits_fail_the_sample() -> Iterator[None]:
    """Within the block, ``os._exit`` on a reward thread of this process raises :class:`RewardExited`;
    native crashes dump the threads' stacks (:mod:`faulthandler`)."""
    real = os._exit
    pid = os.getpid()

    def guarded(code: int) -> Any:
        if os.getpid() == pid and threading.current_thread().name.startswith(REWARD_THREADS):
            caller = traceback.extract_stack(limit=2)[0]
            where = f"{caller.name} ({caller.filename}:{caller.lineno})"
            print(f"rewardhub serve: WARNING: {where} called os._exit({code}) on a reward thread; its "
                  "sample fails and the server goes on (a reward must not end its process)",
                  file=sys.stderr, flush=True)
            raise RewardExited(f"the reward called os._exit({code}), which would end the server; "
                               f"this sample fails instead ({where})")
        real(code)

    was_enabled = faulthandler.is_enabled()
    if not was_enabled:
        faulthandler.enable(file=sys.stderr, all_threads=True)
    setattr(os, "_exit", guarded)  # noqa: B010 - the module's attribute, swapped for the block
    try:
        yield
    finally:
        setattr(os, "_exit", real)  # noqa: B010
        if not was_enabled:
            faulthandler.disable()


#: seconds between two takings back of the stop signals (:func:`keep_stop_signals`)
RECLAIM_EVERY_S = 0.2


def reclaim_stop_signals() -> None:
    """Install this process's own SIGTERM and SIGINT handlers again at the C level (main thread only).

    Ray's core worker, once started (in any thread), installs a failure-signal handler of its own for
    SIGTERM that dumps the stack, hands the signal on, and later makes the driver abort (exit -6) at
    ``ray.shutdown``; the server's drain needs the signal for itself. Setting the Python handler
    again puts Python's own C handler back in front (Ray's for SIGSEGV and the rest stays)."""
    if "ray" not in sys.modules or threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGTERM, signal.SIGINT):
        handler = signal.getsignal(sig)
        if handler is not None:
            signal.signal(sig, handler)


async def keep_stop_signals() -> None:
    """:func:`reclaim_stop_signals` every :data:`RECLAIM_EVERY_S` until cancelled (Ray may start in
    any Runner call)."""
    import asyncio

    while True:
        reclaim_stop_signals()
        await asyncio.sleep(RECLAIM_EVERY_S)
