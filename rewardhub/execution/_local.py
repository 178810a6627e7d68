"""Inline and thread execution of reward calls, with timeouts where they can hold (asyncio: see
:mod:`._async`)."""

from __future__ import annotations

import collections
import contextlib
import inspect
import signal
import threading
import time
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Sequence
from typing import Any

from ..errors import Interrupted
from ._outcome import error_text

__all__ = ["Call", "Result", "in_fresh_loop", "interrupts_told_apart", "reward_exit", "run_awaitable",
           "run_inline", "run_threads"]

#: a zero-argument callable that performs one reward call (sync, or returning an awaitable)
Call = Callable[[], Any]
#: (status, value or error text, latency seconds)
Result = tuple[str, Any, float]


#: whether this thread runs under :func:`interrupts_told_apart` (a real Ctrl-C raises Interrupted)
_told_apart = threading.local()


@contextlib.contextmanager
def interrupts_told_apart() -> Iterator[None]:
    """While rewards run in this (main) thread, a real Ctrl-C raises :class:`~rewardhub.Interrupted`,
    so that a reward's own ``KeyboardInterrupt`` (or ``SystemExit``) fails its sample only.

    Only where Python's own SIGINT handler is in place and in the main thread; elsewhere a
    ``KeyboardInterrupt`` is taken to be the user's and stops the run. Where SIGINT is ignored (a
    command a shell started in the background), no Ctrl-C can reach the process: a
    ``KeyboardInterrupt`` can then only be a reward's own, and is told apart as such.
    """
    if threading.current_thread() is not threading.main_thread() or getattr(_told_apart, "on", False):
        yield
        return
    handler = signal.getsignal(signal.SIGINT)
    if handler is not signal.SIG_IGN and handler is not signal.default_int_handler:
        yield
        return

    def on_sigint(signum: int, frame: Any) -> None:
        raise Interrupted("SIGINT")

    catch = handler is signal.default_int_handler  # an ignored SIGINT stays ignored
    if catch:
        signal.signal(signal.SIGINT, on_sigint)
    _told_apart.on = True
    try:
        yield
    finally:
        _told_apart.on = False
        if catch:
            signal.signal(signal.SIGINT, signal.default_int_handler)


def reward_exit(exc: BaseException, own_thread: bool = False) -> bool:
    """Whether a ``BaseException`` that a reward call raised is the reward's failure (``SystemExit``,
    its own ``KeyboardInterrupt``), not the user stopping the run: then it fails that sample only."""
    if isinstance(exc, Interrupted):
        return False
    if isinstance(exc, SystemExit):
        return True
    if isinstance(exc, KeyboardInterrupt):  # signals reach the main thread only
        return own_thread or getattr(_told_apart, "on", False)
    return False


def _call_once(call: Call, own_thread: bool = False) -> Result:
    """One sync call (an awaitable result is run to completion); a raised exception is data, and
    so is a reward's ``sys.exit`` or ``KeyboardInterrupt`` (see :func:`reward_exit`)."""
    start = time.perf_counter()
    try:
        raw = call()
        if inspect.isawaitable(raw):
            raw = run_awaitable(raw)
        return ("ok", raw, time.perf_counter() - start)
    except Exception as exc:  # a bad reward is data
        return ("error", error_text(exc), time.perf_counter() - start)
    except BaseException as exc:
        if not reward_exit(exc, own_thread):
            raise
        return ("error", error_text(exc), time.perf_counter() - start)


def run_inline(calls: Sequence[Call], retries: int) -> list[Result]:
    """Call one after another in this thread (no timeout can interrupt a sync call here)."""
    out: list[Result] = []
    began = None  # when the running call began (read by ._stall, as is ``out``)
    with interrupts_told_apart():
        for call in calls:
            for attempt in range(retries + 1):
                began = time.perf_counter()  # noqa: F841 - read by ._stall from this frame
                res = _call_once(call)
                if res[0] == "ok" or attempt == retries:
                    break
            out.append(res)
    return out


def run_awaitable(aw: Any) -> Any:
    """``await aw`` to completion from sync code (:func:`in_fresh_loop`)."""
    async def _go() -> Any:
        return await aw

    return in_fresh_loop(_go)


def in_fresh_loop(factory: Callable[[], Any]) -> Any:
    """Run a coroutine factory to completion, even if this thread already runs a loop."""
    import asyncio  # imported when a coroutine is run: most runs never need it
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(factory())
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["v"] = asyncio.run(factory())
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            box["e"] = exc

    t = threading.Thread(target=target, name="rewardhub-async", daemon=True)
    t.start()
    t.join()
    if "e" in box:
        raise box["e"]
    return box["v"]


class _Slot:
    """One reward thread of :func:`run_threads`: the calls it took (``batch``), which of them runs
    (``pos``) and since when (``began``; ``None`` between calls); ``abandoned`` once its running
    call timed out. Read and written under its ``lock`` (the thread's own: not contended)."""

    __slots__ = ("abandoned", "batch", "began", "lock", "pos")

    def __init__(self) -> None:
        self.abandoned = False
        self.batch: list[int] = []
        self.pos = 0
        self.began: float | None = None
        self.lock = threading.Lock()

    def over(self) -> bool:
        """Whether the pool has taken this thread's calls back (read under ``lock``, anew each time)."""
        return self.abandoned


#: a reward thread takes at most this many calls at once, and about _BATCH_S seconds of them
_BATCH_MAX = 64
_BATCH_S = 0.002


def run_threads(calls: Sequence[Call], timeout_s: float | None, max_concurrency: int | None,
                retries: int) -> tuple[list[Result], int]:
    """Run calls on threads, at most ``max_concurrency`` (default 8) at once.

    That many threads each take calls from a shared queue until it is empty (no thread is started
    per call): a few at a time (about 2 ms of them, by the mean call time so far, so that the
    queue's lock is not fought over for every trivial call), the fewer the less is left. A call
    past its timeout is reported as a timeout, the calls its thread took and has not started go
    back to the queue, and a new thread takes its thread's place; but a thread cannot be killed:
    the hung call keeps running in the background until it returns (then its thread ends). Why not
    ``concurrent.futures``: 10x its cost per trivial call, and it joins a hung call's thread at exit
    (bench/bench_threads.py).

    :returns: the results and the number of abandoned (still running) threads.
    """
    limit = max_concurrency or 8
    n = len(calls)
    results: list[Result | None] = [None] * n
    attempts = [0] * n
    todo = collections.deque(range(n))
    slots: list[_Slot] = []
    cond = threading.Condition()
    clock = time.monotonic
    state: dict[str, Any] = {"left": n, "live": 0, "abandoned": 0, "calls": 0, "busy_s": 0.0}

    def take() -> list[int]:  # under cond
        mean = state["busy_s"] / state["calls"] if state["calls"] else None
        size = 1 if mean is None else max(1, min(_BATCH_MAX, int(_BATCH_S / max(mean, 1e-9))))
        size = max(1, min(size, len(todo) // (2 * limit)))
        return [todo.popleft() for _ in range(size)]

    def worker(slot: _Slot) -> None:
        while True:
            with cond:
                if slot.abandoned or not todo:
                    if not slot.abandoned:
                        state["live"] -= 1
                    return
                batch = take()
            with slot.lock:
                slot.batch, slot.pos = batch, 0
            t0 = clock()
            for pos, i in enumerate(batch):
                while True:
                    with slot.lock:
                        if slot.over():
                            return
                        slot.pos = pos
                        attempts[i] += 1
                        slot.began = clock()
                    try:
                        res = _call_once(calls[i], own_thread=True)
                    except BaseException as exc:  # noqa: BLE001 - whatever the reward raised; the run must go on
                        res = ("error", error_text(exc), 0.0)
                    with slot.lock:
                        if slot.over():  # timed out meanwhile: the pool has taken over its calls
                            return
                        slot.began = None
                        if res[0] != "ok" and attempts[i] <= retries:
                            continue
                        results[i] = res
                        break
            with cond:
                state["calls"] += len(batch)
                state["busy_s"] += clock() - t0
                state["left"] -= len(batch)
                if not state["left"]:
                    cond.notify()

    def start() -> None:
        state["live"] += 1
        slot = _Slot()
        slots.append(slot)
        threading.Thread(target=worker, args=(slot,), daemon=True, name="rewardhub-reward").start()

    def expire(slot: _Slot, began: float, now: float) -> None:  # under cond
        with slot.lock:
            if slot.abandoned or slot.began != began:  # it moved on meanwhile
                return
            slot.abandoned = True
            i, rest = slot.batch[slot.pos], slot.batch[slot.pos + 1:]
        slots.remove(slot)
        state["live"] -= 1
        state["abandoned"] += 1
        state["left"] -= slot.pos  # the calls it finished before this one
        todo.extend(rest)
        if attempts[i] <= retries:
            todo.append(i)
        else:
            results[i] = (
                "timeout",
                f"timed out after {timeout_s:g}s (the thread cannot be killed and runs on; "
                "use executor: process to kill)",
                now - began,
            )
            state["left"] -= 1

    with cond:
        while state["left"]:
            while todo and state["live"] < limit:
                start()
            wait = None
            if timeout_s:
                now = clock()
                soonest = None
                for slot in list(slots):
                    began = slot.began
                    if began is None:
                        continue
                    if now - began >= timeout_s:
                        expire(slot, began, now)
                    elif soonest is None or began < soonest:
                        soonest = began
                if todo and state["live"] < limit:
                    continue
                wait = max(0.001, timeout_s if soonest is None else soonest + timeout_s - now)
            if state["left"]:
                cond.wait(wait)
    return [r if r is not None else ("error", "no result", 0.0) for r in results], state["abandoned"]
