"""Requests from many clients pooled into Runner calls.

A request's rows wait in a queue; the batcher takes every request waiting (up to ``max_batch_rows``
rows, never splitting a request) into one :meth:`Runner.score` call, made on a worker thread so that
the event loop keeps answering, and hands each request its own rows back.

What a client gets depends on its own request only: each request is checked before it is queued (a
malformed row fails its own request, 400, never another's); where a term is a group reward, requests
that share a group key (two trainers whose uids both start at 0, or the same prompt) are never pooled
into one call, so no group mixes two clients' rows; a call that fails as a whole is made again request
by request, so that only the request at fault fails; and once every request of a call has gone (their
clients disconnected), its reward calls not yet made are dropped. While a batch is scored,
the next one gathers. Rows are scored exactly as ``rewardhub score`` scores them (the same
:func:`rewardhub.scoring.score_rows`), so the answers are equal row for row.

Up to ``max_calls`` Runner calls run at once (:data:`MAX_CALLS`, ``rewardhub serve --max-calls``):
the Runner is safe for concurrent callers, whose batches share the process pool's workers. A request
arriving while a slot is free is scored at once, beside the calls in flight (so a call held by a
hanging reward until its ``timeout_s`` does not hold up the others); the requests arriving while every
slot is busy wait, and the next free slot takes all of them into one call (pooled, not one by one).
A config with ``executor: ray`` terms gets one call at a time: the Ray reward-worker pool
(:class:`rewardhub.distributed.RewardWorkerPool`) keeps its dispatch state without a lock, so it is
not made safe for concurrent callers.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field
from typing import Any

from ..errors import RewardhubError
from ..execution import Scorer
from ..scoring import Scored
from ..scoring import has_group_terms
from ..scoring import missing_ground_truth
from ..scoring import output_row
from ..scoring import score_rows
from . import MAX_CALLS
from ._metrics import ServerMetrics

__all__ = ["Batcher", "max_calls_for"]


def max_calls_for(runner: Scorer, wanted: int) -> int:
    """``wanted``, or 1 when a term runs on Ray (its reward-worker pool is not safe for concurrent
    callers)."""
    return 1 if any(f.executor == "ray" for f in runner.facts) else max(1, wanted)


@dataclass
class _Pending:
    rows: list[dict[str, Any]]
    future: asyncio.Future[list[dict[str, Any]]]
    #: the request's groups (:func:`~rewardhub.execution.group_key`), where a term is a group reward
    groups: frozenset[str] = frozenset()
    queued: float = field(default_factory=time.monotonic)


class Batcher:
    """Pools the rows of concurrent requests into Runner calls; :meth:`score` is what a handler awaits."""

    def __init__(self, runner: Scorer, metrics: ServerMetrics, *, max_batch_rows: int = 4096,
                 max_calls: int = MAX_CALLS) -> None:
        from ..datasets import terms_needing

        self.runner = runner
        self.metrics = metrics
        self.max_batch_rows = max_batch_rows
        self.needing = terms_needing(runner)
        #: the terms whose failure fails the request (on_failure: raise)
        self.raising = [f.name for f in runner.facts if f.on_failure == "raise"]
        #: a term is a group reward: requests that share a group key are never pooled in one call
        self.grouped = has_group_terms(runner)
        self._queue: list[_Pending] = []
        self._wake = asyncio.Event()
        self.max_calls = max_calls_for(runner, max_calls)
        self._slots = asyncio.Semaphore(self.max_calls)
        self._threads = concurrent.futures.ThreadPoolExecutor(
            self.max_calls, thread_name_prefix="rewardhub-score"
        )
        #: the Runner calls running now: their requests and when each started (``/health``)
        self.busy: dict[asyncio.Task[None], tuple[float, list[_Pending]]] = {}
        self._closing = False
        self._loop_task: asyncio.Task[None] | None = None

    # ---- the handlers' side -------------------------------------------------------------
    async def score(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The output rows of ``rows`` (input row + ``score``, ``rewards``, ``extra``, ``errors``)."""
        if self._closing:
            raise RewardhubError("the server is shutting down")
        from ..execution import check_sample
        from ..execution import group_key

        for i, row in enumerate(rows):  # a malformed row fails its own request, before any pooling
            check_sample(row, i)
        groups = frozenset(map(group_key, rows)) if self.grouped else frozenset()
        fut: asyncio.Future[list[dict[str, Any]]] = asyncio.get_running_loop().create_future()
        self._queue.append(_Pending(rows, fut, groups))
        self._wake.set()
        self.metrics.inflight += 1
        try:
            return await fut
        finally:
            self.metrics.inflight -= 1

    # ---- the batching loop --------------------------------------------------------------
    def start(self) -> None:
        self._loop_task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            if not self._queue:
                if self._closing:
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            await self._slots.acquire()
            batch = self._take()  # whatever waited while the slot was busy: the next batch
            if not batch:
                self._slots.release()
                continue
            task = asyncio.get_running_loop().create_task(self._score_batch(batch))
            self.busy[task] = (time.monotonic(), batch)
            task.add_done_callback(lambda t: self.busy.pop(t, None))

    def _take(self) -> list[_Pending]:
        """The next call's requests: those waiting, in order, up to ``max_batch_rows`` rows; a request
        sharing a group with one taken (two clients whose uids both start at 0, or who send the same
        prompt) waits for the next call, so that a group reward grades each request's groups alone."""
        taken: list[_Pending] = []
        waiting: list[_Pending] = []
        keys: set[str] = set()
        rows = 0
        while self._queue and (not taken or rows + len(self._queue[0].rows) <= self.max_batch_rows):
            p = self._queue.pop(0)
            if p.future.cancelled():  # its client went away before it was scored
                continue
            if not keys.isdisjoint(p.groups):
                waiting.append(p)
                continue
            taken.append(p)
            keys.update(p.groups)
            rows += len(p.rows)
        self._queue[:0] = waiting
        return taken

    async def _score_batch(self, batch: list[_Pending]) -> None:
        """One Runner call for the pooled requests. A term with ``on_failure: raise`` does not raise
        in it (``defer_raise``): the requests whose own rows failed get that error, alone; the others
        get their rows, and no row is scored twice."""
        self.metrics.calls += 1
        try:
            try:
                await self._score_requests(batch)
            except Exception as exc:  # not a reward's failure (those are in the columns)
                if len(batch) == 1:
                    self.metrics.batch_failures += 1
                    _set(batch[0].future, exc=exc)
                    return
                for p in batch:  # each request alone: only the one at fault fails
                    if p.future.done():  # its client went away
                        continue
                    try:
                        await self._score_requests([p])
                    except Exception as alone:
                        self.metrics.batch_failures += 1
                        _set(p.future, exc=alone)
        finally:
            self.metrics.calls -= 1
            self._slots.release()
            self._wake.set()

    async def _score_requests(self, batch: list[_Pending]) -> None:
        """One Runner call for ``batch``'s rows, each request answered with its own; the calls not
        made yet are dropped once every request's client has gone away.

        :raises Exception: the call failed other than by a reward's failure."""
        from ..execution import Cancel

        rows = [r for p in batch for r in p.rows]
        indices = [i for p in batch for i in range(len(p.rows))]  # each row's number in its request
        cancel = Cancel()

        def gone(_: Any) -> None:
            if all(p.future.cancelled() for p in batch):
                cancel.set()

        for p in batch:
            p.future.add_done_callback(gone)
        scored = await self._call(functools.partial(
            score_rows, self.runner, rows, missing_ground_truth(rows, self.needing), indices=indices,
            defer_raise=True, cancel=cancel))
        k = 0
        for p in batch:
            mine = range(k, k + len(p.rows))
            failed = _raised(self.raising, scored, mine)
            if failed is not None:
                self.metrics.batch_failures += 1
                _set(p.future, exc=failed)
            else:
                _set(p.future, [output_row(rows[i], scored.results[i]) for i in mine])
            k += len(p.rows)

    async def _call(self, fn: Callable[[], Scored]) -> Scored:
        scored = await asyncio.get_running_loop().run_in_executor(self._threads, fn)
        self.metrics.batch(len(scored.results), scored.columns)  # on the loop's thread (see ServerMetrics)
        return scored

    # ---- health ---------------------------------------------------------------------------
    def busy_calls(self) -> list[dict[str, Any]]:
        """The Runner calls running now, the longest first: seconds running, requests, rows."""
        now = time.monotonic()
        calls = sorted(self.busy.values(), key=lambda b: b[0])
        return [{"seconds": round(now - start, 1), "requests": len(batch),
                 "rows": sum(len(p.rows) for p in batch)} for start, batch in calls]

    def stuck_for(self) -> float:
        """Seconds for which every call slot has been busy (0.0 while one is free): a reward that
        hangs with no ``timeout_s`` holds its slot for ever."""
        if len(self.busy) < self.max_calls:
            return 0.0
        return time.monotonic() - max(start for start, _ in self.busy.values())

    # ---- shutdown -------------------------------------------------------------------------
    async def drain(self, deadline: float, hurry: asyncio.Event) -> list[dict[str, Any]]:
        """Score what is queued and in flight until ``deadline`` (``time.monotonic()``) or until
        ``hurry`` is set, then stop (new requests are refused). The requests still waiting then get
        an error (a 503); the calls still running are returned (``busy_calls``), and their threads
        are left behind: a hung reward cannot be stopped from here."""
        self._closing = True
        self._wake.set()
        waits: list[asyncio.Future[Any]] = [asyncio.ensure_future(hurry.wait())]
        if self._loop_task is not None:
            waits.append(self._loop_task)
        while self.busy or (self._loop_task is not None and not self._loop_task.done()):
            left = deadline - time.monotonic()
            if left <= 0 or hurry.is_set():
                break
            pending = [*waits[1:], *self.busy]
            await asyncio.wait([waits[0], *pending], timeout=left, return_when=asyncio.FIRST_COMPLETED)
        waits[0].cancel()
        stuck = self.busy_calls()
        if self._loop_task is not None and not self._loop_task.done():
            self._loop_task.cancel()
        why = RewardhubError("the server stopped before this request was scored: a reward call was still "
                             "running when the drain ended (--drain-timeout)")
        for p in [*self._queue, *(p for _, batch in self.busy.values() for p in batch)]:
            _set(p.future, exc=why)
        self._queue.clear()
        self._threads.shutdown(wait=not stuck, cancel_futures=True)
        return stuck


def _raised(raising: list[str], scored: Scored, rows: range) -> Exception | None:
    """The error ``on_failure: raise`` gives for the first failed row among ``rows``, if any (a row not
    given to the rewards raises nothing)."""
    from ..execution import ERROR
    from ..execution import TIMEOUT
    from ..execution import failure_error

    for name in raising:
        col = scored.columns[name]
        for k in (scored.position[i] for i in rows if i not in scored.skipped):
            if col.status.get(k) in (ERROR, TIMEOUT):
                return failure_error(name, col, k)
    return None


def _set(fut: asyncio.Future[list[dict[str, Any]]], rows: list[dict[str, Any]] | None = None, *,
         exc: BaseException | None = None) -> None:
    if fut.done():
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(rows or [])
