"""Start pool processes from a thread that lasts as long as this process.

A pool process asks the kernel to SIGKILL it when its parent dies (``PR_SET_PDEATHSIG``, so that no
worker outlives a killed run); Linux counts the *thread* that forked it as its parent. A pool
driven from a short-lived thread (a caller's thread; see :mod:`._callers`) would see its workers
killed as that thread ends. So forks made outside the main thread happen in one long-lived daemon
thread instead, which ends only with the process.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any
from typing import TypeVar

__all__ = ["in_lasting_thread"]

T = TypeVar("T")

_jobs: queue.SimpleQueue[tuple[Callable[[], Any], dict[str, Any], threading.Event]] = queue.SimpleQueue()
_started = False
_start_lock = threading.Lock()


def _serve() -> None:
    while True:
        fn, box, ready = _jobs.get()
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            box["error"] = exc
        ready.set()


def in_lasting_thread(fn: Callable[[], T]) -> T:
    """``fn()``, called in the main thread when called there, else in the long-lived forking thread."""
    global _started
    if threading.current_thread() is threading.main_thread():
        return fn()
    with _start_lock:
        if not _started:
            threading.Thread(target=_serve, name="rewardhub-forker", daemon=True).start()
            _started = True
    box: dict[str, Any] = {}
    ready = threading.Event()
    _jobs.put((fn, box, ready))
    ready.wait()
    if "error" in box:
        raise box["error"]
    value: T = box["value"]
    return value
