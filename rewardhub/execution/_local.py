"""Inline, thread and asyncio execution of reward calls, with timeouts where they can hold."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import signal
import threading
import time
from collections.abc import Callable
from collections.abc import Iterator
from typing import Any

from ..errors import Interrupted
from ._outcome import error_text

__all__ = ["Call", "interrupts_told_apart", "reward_exit", "run_async", "run_inline", "run_threads"]

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
    ``KeyboardInterrupt`` is taken to be the user's and stops the run.
    """
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
            or getattr(_told_apart, "on", False)):
        yield
        return

    def on_sigint(signum: int, frame: Any) -> None:
        raise Interrupted("SIGINT")

    signal.signal(signal.SIGINT, on_sigint)
    _told_apart.on = True
    try:
        yield
    finally:
        _told_apart.on = False
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
            raw = _run_coro(raw)
        return ("ok", raw, time.perf_counter() - start)
    except Exception as exc:  # a bad reward is data
        return ("error", error_text(exc), time.perf_counter() - start)
    except BaseException as exc:
        if not reward_exit(exc, own_thread):
            raise
        return ("error", error_text(exc), time.perf_counter() - start)


def run_inline(calls: list[Call], retries: int) -> list[Result]:
    """Call one after another in this thread (no timeout can interrupt a sync call here)."""
    out: list[Result] = []
    with interrupts_told_apart():
        for call in calls:
            for attempt in range(retries + 1):
                res = _call_once(call)
                if res[0] == "ok" or attempt == retries:
                    break
            out.append(res)
    return out


def _run_coro(aw: Any) -> Any:
    async def _go() -> Any:
        return await aw

    return _in_fresh_loop(_go)


def _in_fresh_loop(factory: Callable[[], Any]) -> Any:
    """Run a coroutine factory to completion, even if this thread already runs a loop."""
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


def run_async(calls: list[Call], timeout_s: float | None, max_concurrency: int | None, retries: int) -> list[Result]:
    """Run async reward calls concurrently on one event loop; ``asyncio`` cancels on timeout."""
    limit = max_concurrency or 64

    async def main() -> list[Result]:
        sem = asyncio.Semaphore(limit)

        async def one(call: Call) -> Result:
            async with sem:
                res: Result = ("error", "not run", 0.0)
                for attempt in range(retries + 1):
                    start = time.perf_counter()
                    try:
                        aw = call()
                        if not inspect.isawaitable(aw):
                            res = ("ok", aw, time.perf_counter() - start)
                        else:
                            raw = await asyncio.wait_for(aw, timeout_s) if timeout_s else await aw
                            res = ("ok", raw, time.perf_counter() - start)
                    except asyncio.TimeoutError:
                        res = ("timeout", f"timed out after {timeout_s:g}s; coroutine cancelled",
                               time.perf_counter() - start)
                    except Exception as exc:
                        res = ("error", error_text(exc), time.perf_counter() - start)
                    except (SystemExit, KeyboardInterrupt) as exc:
                        if not reward_exit(exc, own_thread=True):  # the loop runs the rewards only
                            raise
                        res = ("error", error_text(exc), time.perf_counter() - start)
                    if res[0] == "ok":
                        break
                return res

        return list(await asyncio.gather(*(one(c) for c in calls)))

    return _in_fresh_loop(main)


def run_threads(calls: list[Call], timeout_s: float | None, max_concurrency: int | None,
                retries: int) -> tuple[list[Result], int]:
    """Run calls on threads, at most ``max_concurrency`` at once.

    A call past its timeout is reported as a timeout and its slot is given to the next call, but
    a thread cannot be killed: the hung call keeps running in the background until it returns.

    :returns: the results and the number of abandoned (still running) threads.
    """
    limit = max_concurrency or 8
    results: list[Result | None] = [None] * len(calls)
    cond = threading.Condition()
    running: dict[int, float] = {}  # index -> start time
    abandoned = 0

    def worker(i: int, call: Call) -> None:
        try:
            res = _call_once(call, own_thread=True)
        except BaseException as exc:  # noqa: BLE001 - whatever the reward raised; the run must go on
            res = ("error", error_text(exc), 0.0)
        with cond:
            if i in running:  # not timed out meanwhile
                del running[i]
                results[i] = res
                if res[0] != "ok":
                    failed.append(i)
                cond.notify_all()

    attempts = [0] * len(calls)
    failed: list[int] = []
    queue = list(range(len(calls)))[::-1]
    with cond:
        while queue or running or failed:
            while queue and len(running) < limit:
                i = queue.pop()
                attempts[i] += 1
                results[i] = None
                running[i] = time.monotonic()
                threading.Thread(target=worker, args=(i, calls[i]), daemon=True,
                                 name=f"rewardhub-reward-{i}").start()
            now = time.monotonic()
            if timeout_s:
                for i, started in list(running.items()):
                    if now - started >= timeout_s:
                        del running[i]
                        abandoned += 1
                        results[i] = ("timeout", f"timed out after {timeout_s:g}s (the thread cannot be "
                                                 "killed and runs on; use executor: process to kill)", now - started)
                        failed.append(i)
                wait = min((s + timeout_s - now for s in running.values()), default=None)
            else:
                wait = None
            # retry failed ones
            while failed:
                i = failed.pop()
                if attempts[i] <= retries:
                    queue.append(i)
            if running and not (queue and len(running) < limit):
                cond.wait(timeout=None if wait is None else max(wait, 0.001))
    return [r if r is not None else ("error", "no result", 0.0) for r in results], abandoned
