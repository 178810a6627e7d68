"""The asyncio executor: async reward calls side by side on one event loop, timed out per call.

The loop runs in a thread of its own and the caller's thread watches it, so that a timeout holds
even for a reward that makes a blocking call (``time.sleep``, a sync HTTP client): such a call holds
the loop, and with it the loop's own watchdog. Past its timeout (and a short grace for the loop's
watchdog) the loop is given up: the blocked call times out, the calls that were waiting on that loop
start again on a fresh one with the calls not yet begun, and the old loop's thread, which cannot be
stopped, takes no more calls and is counted as abandoned. A loop is given up sooner, once its own
watchdog has not run for a while (:func:`_hold_s`) though a call holds it: the call holding it keeps
its own deadline, and the calls not begun (and those that only waited) run on threads, each on an
event loop of its own, so that a reward that blocks on every call costs about one timeout for the
batch, not one per call.
"""

from __future__ import annotations

import collections
import contextlib
import inspect
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Any

from ._local import Call
from ._local import Result
from ._local import in_fresh_loop
from ._local import reward_exit
from ._local import run_threads
from ._outcome import error_text

if TYPE_CHECKING:
    import asyncio

__all__ = ["run_async"]


class _Slot:
    """One worker coroutine: the call it has taken (``index``), when that call's awaitable began
    (``None``: not awaiting), whether the loop's watchdog cancelled it for its timeout."""

    __slots__ = ("began", "expired", "index", "task")

    def __init__(self) -> None:
        self.task: asyncio.Task[Any] | None = None
        self.index: int | None = None
        self.began: float | None = None
        self.expired = False


class _Batch:
    """What the loops of one :func:`run_async` share with the caller's thread (under ``lock``):
    the calls left, the results, and the tries of each call."""

    def __init__(self, calls: Sequence[Call], timeout_s: float | None, retries: int) -> None:
        self.calls = calls
        self.timeout_s = timeout_s
        self.retries = retries
        self.todo = collections.deque(range(len(calls)))
        self.results: list[Result | None] = [None] * len(calls)
        self.tries = [0] * len(calls)
        self.lock = threading.Lock()


class _Loop:
    """One event loop's run over the batch's calls (see the module's text)."""

    def __init__(self, batch: _Batch, limit: int) -> None:
        self.batch = batch
        self.slots = [_Slot() for _ in range(min(limit, len(batch.todo)))]
        self.given_up = False  # under batch.lock: the caller has given this loop up
        #: under batch.lock: the calls a given-up loop still runs (index -> when it began), whose
        #: result is taken if it comes before its deadline
        self.kept: dict[int, float] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        #: when the loop last ran its watchdog (it cannot while a call holds it)
        self.tick = time.perf_counter()

    def _next(self, slot: _Slot) -> int | None:
        b = self.batch
        with b.lock:
            slot.index = None
            if self.given_up or not b.todo:
                return None
            i = slot.index = b.todo.popleft()
            b.tries[i] += 1
            return i

    def _put(self, slot: _Slot, i: int, res: Result) -> bool:
        """Store a call's result; False when it is to be tried again."""
        b = self.batch
        with b.lock:
            if self.given_up:
                if self.kept.pop(i, None) is not None:  # in time: its answer, else once more (on a thread)
                    if res[0] == "ok" or b.tries[i] > b.retries:
                        b.results[i] = res
                    else:
                        b.todo.append(i)
                return True
            if res[0] != "ok" and b.tries[i] <= b.retries:
                b.tries[i] += 1
                return False
            b.results[i] = res
            slot.index = None
            return True

    async def _one(self, slot: _Slot, call: Call) -> Result:
        import asyncio

        pc = time.perf_counter
        start = pc()
        slot.expired = False
        try:
            aw = call()
            if not inspect.isawaitable(aw):
                return ("ok", aw, pc() - start)
            slot.began = start
            try:
                raw = await aw
            finally:
                slot.began = None
            if slot.expired:  # the reward swallowed its cancellation: still a timeout
                raise asyncio.CancelledError
            return ("ok", raw, pc() - start)
        except asyncio.CancelledError:
            if not slot.expired:  # not ours: the run itself is cancelled
                raise
            if slot.task is not None:
                slot.task.uncancel()
            return ("timeout", f"timed out after {self.batch.timeout_s:g}s; coroutine cancelled",
                    pc() - start)
        except Exception as exc:
            return ("error", error_text(exc), pc() - start)
        except (SystemExit, KeyboardInterrupt) as exc:
            if not reward_exit(exc, own_thread=True):  # the loop runs the rewards only
                raise
            return ("error", error_text(exc), pc() - start)

    async def main(self) -> None:
        import asyncio

        self.loop = asyncio.get_running_loop()

        async def worker(slot: _Slot) -> None:
            slot.task = asyncio.current_task()
            i = self._next(slot)
            while i is not None:
                if self._put(slot, i, await self._one(slot, self.batch.calls[i])):
                    i = self._next(slot)

        timeout_s = self.batch.timeout_s
        watch = asyncio.create_task(self._watchdog(timeout_s)) if timeout_s else None
        try:
            await asyncio.gather(*(worker(slot) for slot in self.slots))
        finally:
            if watch is not None:
                watch.cancel()

    async def _watchdog(self, limit_s: float) -> None:
        """Cancel a call past its timeout (no timer per call), while the loop is free to."""
        import asyncio

        pc = time.perf_counter
        beat = _hold_s(limit_s) / 2
        while True:
            now, soonest = pc(), None
            self.tick = now
            for slot in self.slots:
                began = slot.began
                if began is None or slot.expired:
                    continue
                if now - began >= limit_s and slot.task is not None:
                    slot.expired = True
                    slot.task.cancel()
                elif soonest is None or began + limit_s < soonest:
                    soonest = began + limit_s
            await asyncio.sleep(min(beat, limit_s if soonest is None else max(0.001, soonest - now)))

    def held(self, now: float, grace_s: float) -> tuple[bool, float]:
        """Whether a call has held the loop past its timeout and ``grace_s`` (the loop's watchdog
        could not act), or the loop's watchdog has not run for :func:`_hold_s` while a call that
        began as long ago runs; else how long until one of them could be."""
        timeout_s = self.batch.timeout_s
        assert timeout_s
        hold_s = _hold_s(timeout_s)
        stale = now - self.tick >= hold_s
        wait = min(timeout_s, max(0.001, self.tick + hold_s - now))
        for slot in self.slots:
            began = slot.began
            if began is None:
                continue
            late = began + timeout_s + grace_s - now
            # held: its watchdog has not run, and this call's coroutine is running (a loop that is
            # only slow to be scheduled on a loaded host waits in select(), with none running)
            if late <= 0 or (stale and now - began >= hold_s and _running(slot)):
                return True, 0.0
            wait = min(wait, late)
        return False, wait

    def give_up(self, now: float) -> None:
        """The loop is held: the call that holds it (the one running now, or one that went on
        after its cancellation) times out, or is tried again, or, not yet at its timeout, is kept
        (:attr:`kept`: it may still answer in time); the other calls it had taken waited for the
        loop, not for themselves: they go back to the front of the queue, tries not counted. The
        loop takes no more calls."""
        b = self.batch
        timeout_s = b.timeout_s
        assert timeout_s
        with b.lock:
            self.given_up = True
            back = []
            for slot in self.slots:
                i, began = slot.index, slot.began
                if i is None:
                    continue
                if began is not None and now - began < timeout_s and _running(slot):
                    self.kept[i] = began
                    continue
                if began is not None and now - began >= timeout_s and (slot.expired or _running(slot)):
                    if b.tries[i] > b.retries:
                        b.results[i] = _held_timeout(timeout_s, now - began)
                        continue
                else:
                    b.tries[i] -= 1
                back.append(i)
            b.todo.extendleft(reversed(back))
        loop = self.loop
        if loop is not None:  # if the held call ever returns, the rest stop at once
            with contextlib.suppress(RuntimeError):  # the loop has closed meanwhile
                loop.call_soon_threadsafe(self._cancel_all)

    def _cancel_all(self) -> None:
        for slot in self.slots:
            if slot.task is not None and slot.index not in self.kept:
                slot.task.cancel()


def _running(slot: _Slot) -> bool:
    """Whether the slot's coroutine is running at this moment (on a held loop: the one holding it)."""
    task = slot.task
    return task is not None and bool(getattr(task.get_coro(), "cr_running", False))


def _held_timeout(timeout_s: float, took: float) -> Result:
    return ("timeout", f"timed out after {timeout_s:g}s; the call held its event loop (a blocking call "
                       "in an async reward?)", took)


def _hold_s(timeout_s: float) -> float:
    """How long a loop's watchdog may go without running (while a call began as long ago) before the
    loop counts as held by a blocking call."""
    return min(1.0, 0.5 * timeout_s)


def run_async(calls: Sequence[Call], timeout_s: float | None, max_concurrency: int | None,
              retries: int) -> tuple[list[Result], int]:
    """Run async reward calls concurrently on an event loop; ``asyncio`` cancels on timeout.

    At most ``max_concurrency`` (default 64) calls at once: that many worker coroutines take the
    next call from a shared queue, so no task is made per call; one watchdog coroutine cancels a
    call that runs past ``timeout_s`` (no timer per call), and the caller's thread gives up a loop
    that a blocking call holds (see the module's text).

    :returns: the results, and the number of threads left running in the background (a given-up
        loop's, and those of calls that timed out on threads).
    """
    batch = _Batch(calls, timeout_s, retries)
    run = _Loop(batch, max_concurrency or 64)  # its slots tell ._stall the calls running
    abandoned = 0
    if not timeout_s:
        in_fresh_loop(run.main)
    else:
        done = _watched(run, timeout_s)
        if run.given_up:
            abandoned = 1 + _after_held(run, done)
    return [r if r is not None else ("error", "no result", 0.0) for r in batch.results], abandoned


def _after_held(run: _Loop, done: threading.Event) -> int:
    """After ``run``'s loop was given up: the calls left run on threads, each on a loop of its own (a
    blocking call then holds its own thread only), and the call the loop still runs (if any) gets its
    answer or its timeout; ``done`` is set when that loop's thread ends. The abandoned threads."""
    b = run.batch
    timeout_s = b.timeout_s
    assert timeout_s
    abandoned = 0
    while True:
        with b.lock:
            todo = list(b.todo)
            b.todo.clear()
        if todo:
            res, n = run_threads([b.calls[i] for i in todo], timeout_s, len(run.slots), b.retries)
            abandoned += n
            with b.lock:
                for i, r in zip(todo, res):
                    b.results[i] = r
        with b.lock:
            began = min(run.kept.values(), default=None)
            if began is None and not b.todo:
                return abandoned
        if began is None:
            continue
        done.wait(max(0.0, began + timeout_s - time.perf_counter()))
        now = time.perf_counter()
        with b.lock:
            for i, began in list(run.kept.items()):
                late = now - began >= timeout_s
                if not (late or done.is_set()):
                    continue
                del run.kept[i]
                if late and b.tries[i] > b.retries:
                    b.results[i] = _held_timeout(timeout_s, now - began)
                else:  # tries left, or its loop ended without its answer: once more, on a thread
                    b.todo.append(i)


def _watched(run: _Loop, timeout_s: float) -> threading.Event:
    """Run the loop in its own thread and watch it from this one (``run.given_up`` once it was
    given up); the event set when the loop's thread ends."""
    import asyncio

    box: dict[str, BaseException] = {}
    done = threading.Event()

    def target() -> None:
        try:
            asyncio.run(run.main())
        except asyncio.CancelledError:  # given up, then its calls cancelled
            pass
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            box["e"] = exc
        finally:
            done.set()

    threading.Thread(target=target, name="rewardhub-async", daemon=True).start()
    grace_s = min(1.0, 0.1 * timeout_s + 0.02)  # for the loop's own watchdog to act
    try:
        while not done.wait(max(0.001, run.held(time.perf_counter(), grace_s)[1])):
            if run.held(time.perf_counter(), grace_s)[0]:
                run.give_up(time.perf_counter())
                return done
    except BaseException:  # Ctrl-C while waiting: the loop is left to stop by itself
        run.give_up(time.perf_counter())
        raise
    if "e" in box and not run.given_up:
        raise box["e"]
    return done
