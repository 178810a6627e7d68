"""A process pool whose hung or crashed workers are killed and replaced: the pool heals."""

from __future__ import annotations

import asyncio
import collections
import inspect
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field
from typing import Any

__all__ = ["ProcessPool", "Task", "WorkerPayload"]


@dataclass(frozen=True)
class WorkerPayload:
    """What a worker needs to rebuild a reward by itself: names and specs, never callables."""

    target: str
    sha256: str | None
    params: tuple[tuple[str, Any], ...]
    kind: str
    adapter: str
    name: str


@dataclass
class Task:
    """One call: a sample (``mode == "one"``) or a list of samples (``"many"``)."""

    key: str
    mode: str
    payload: Any  # a sample dict, or a list of them
    kwargs: dict[str, Any]
    timeout_s: float | None
    retries: int = 0
    attempts: int = 0
    tag: Any = None  # the caller's bookkeeping (indices)
    result: tuple[str, Any, float] | None = field(default=None)  # (status, value|error, latency)


# ---------------------------------------------------------------------------- worker side
def _build(payload: WorkerPayload) -> Any:
    import functools

    from .._targets import load_target
    from ._calls import make_invoker

    fn = load_target(payload.target, payload.sha256)
    if payload.params:
        fn = functools.partial(fn, **dict(payload.params))
    return make_invoker(fn, payload.kind, payload.adapter, payload.name)


def _worker_main(conn: Any) -> None:
    os.setpgrp()  # its own process group, so a kill takes whatever it started
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    invokers: dict[str, Any] = {}
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        key, payload, mode, data, kwargs = msg
        start = time.perf_counter()
        try:
            if key not in invokers:
                invokers[key] = _build(payload)
            inv = invokers[key]
            raw = inv.call_one(data, kwargs) if mode == "one" else inv.call_many(data, kwargs)
            if inspect.isawaitable(raw):
                raw = asyncio.run(_await(raw))
            reply: tuple[str, Any, float] = ("ok", raw, time.perf_counter() - start)
        except BaseException as exc:  # noqa: BLE001 - a bad reward is data
            reply = ("error", f"{type(exc).__name__}: {exc}", time.perf_counter() - start)
        try:
            conn.send(reply)
        except Exception as exc:  # an unpicklable return value
            conn.send(("error", f"return value cannot be sent back: {type(exc).__name__}: {exc}",
                       time.perf_counter() - start))


async def _await(aw: Any) -> Any:
    return await aw


# ---------------------------------------------------------------------------- parent side
class _Worker:
    def __init__(self, ctx: Any) -> None:
        parent, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child,), daemon=True, name="rewardhub-worker")
        self.proc.start()
        child.close()
        self.conn = parent
        self.known: set[str] = set()
        self.task: Task | None = None
        self.started = 0.0

    def stop(self) -> None:
        """Ask the worker to exit; kill it if it does not within 2 s."""
        try:
            self.conn.send(None)
        except (BrokenPipeError, OSError):
            pass
        self.proc.join(2)
        if self.proc.is_alive():
            self.kill()
        else:
            self.conn.close()

    def kill(self) -> None:
        pid = self.proc.pid
        if pid is not None:
            for sig_target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
                try:
                    sig_target()
                except (ProcessLookupError, PermissionError):
                    pass
        self.proc.join(5)
        self.conn.close()


class ProcessPool:
    """``size`` worker processes; each runs one task at a time.

    A task past its ``timeout_s`` gets its worker's whole process group killed; a worker that
    dies (SIGKILL, segfault, ``os._exit``) fails only its current task. Either way a new worker
    takes its place before the next task.

    :ivar kills: workers killed for a timeout. :ivar crashes: workers that died by themselves.
    """

    def __init__(self, size: int, start_method: str | None = None, stuck_after_s: float = 0.2,
                 max_spares: int | None = None) -> None:
        if start_method is None:
            start_method = "fork" if sys.platform.startswith("linux") else "spawn"
        self._ctx = multiprocessing.get_context(start_method)
        self.size = max(1, int(size))
        self._workers: list[_Worker] = []
        self._payloads: dict[str, WorkerPayload] = {}
        self.kills = 0
        self.crashes = 0
        #: a task running longer than this is "stuck": a spare worker takes its place in the
        #: rotation (at most ``max_spares``; a stuck task that sleeps then costs no throughput,
        #: one that burns CPU still costs its core until the timeout) until it finishes or its timeout kills it
        self.stuck_after_s = stuck_after_s
        self.spares_started = 0
        self.max_spares = 8 * self.size if max_spares is None else max_spares

    def register(self, key: str, payload: WorkerPayload) -> None:
        self._payloads[key] = payload

    def _ensure(self) -> None:
        while len(self._workers) < self.size:
            self._workers.append(_Worker(self._ctx))

    def pids(self) -> list[int]:
        return [w.proc.pid for w in self._workers if w.proc.pid is not None]

    def _replace(self, w: _Worker) -> None:
        self._workers.remove(w)
        w.kill()
        if len(self._workers) < self.size:
            self._workers.append(_Worker(self._ctx))

    def _send(self, w: _Worker, task: Task) -> None:
        payload = None if task.key in w.known else self._payloads[task.key]
        task.attempts += 1
        w.task, w.started = task, time.monotonic()
        w.conn.send((task.key, payload, task.mode, task.payload, task.kwargs))
        w.known.add(task.key)

    def _finish(self, w: _Worker, result: tuple[str, Any, float], queue: collections.deque[Task],
                done: Callable[[Task], None]) -> None:
        task = w.task
        assert task is not None
        w.task = None
        if result[0] != "ok" and task.attempts <= task.retries:
            queue.appendleft(task)
            return
        task.result = result
        done(task)

    def run(self, tasks: list[Task], done: Callable[[Task], None] = lambda t: None) -> list[Task]:
        """Run every task to a result (``ok``, ``error`` or ``timeout``); returns them in order."""
        self._ensure()
        queue = collections.deque(tasks)
        while queue or any(w.task is not None for w in self._workers):
            for w in self._workers:
                if w.task is None and queue:
                    try:
                        self._send(w, queue[0])
                        queue.popleft()
                    except (BrokenPipeError, OSError):  # died while idle
                        self.crashes += 1
                        self._replace(w)
            busy = [w for w in self._workers if w.task is not None]
            if not busy:
                continue
            now = time.monotonic()
            if queue and len(self._workers) < self.size + self.max_spares:
                stuck = sum(now - w.started > self.stuck_after_s for w in busy)
                if len(self._workers) - stuck < self.size:
                    self._workers.append(_Worker(self._ctx))
                    self.spares_started += 1
                    continue
            stuck_deadlines = [w.started + self.stuck_after_s - now for w in busy
                               if queue and now - w.started <= self.stuck_after_s]
            deadlines = [w.started + w.task.timeout_s - now for w in busy if w.task and w.task.timeout_s]
            deadlines += stuck_deadlines
            wait_s = max(0.0, min(deadlines)) if deadlines else None
            waitables: list[Any] = [w.conn for w in busy] + [w.proc.sentinel for w in busy]
            ready = set(multiprocessing.connection.wait(waitables, timeout=wait_s))
            for w in busy:
                if w.conn in ready:
                    try:
                        result = w.conn.recv()
                    except (EOFError, OSError):
                        result = None
                    if result is not None:
                        self._finish(w, result, queue, done)
                        continue
                if w.conn in ready or w.proc.sentinel in ready:
                    w.proc.join(1)
                    code = w.proc.exitcode
                    how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
                    self.crashes += 1
                    self._finish(w, ("error", f"reward worker process died ({how})",
                                     time.monotonic() - w.started), queue, done)
                    self._replace(w)
                    continue
                task = w.task
                if task is not None and task.timeout_s and time.monotonic() - w.started >= task.timeout_s:
                    self.kills += 1
                    elapsed = time.monotonic() - w.started
                    self._finish(w, ("timeout", f"timed out after {task.timeout_s:g}s; worker killed", elapsed),
                                 queue, done)
                    self._replace(w)
        self._trim()
        return tasks

    def _trim(self) -> None:
        """Retire idle spare workers so the pool is back to ``size``."""
        while len(self._workers) > self.size:
            idle = next((w for w in self._workers if w.task is None), None)
            if idle is None:
                return
            self._workers.remove(idle)
            idle.stop()

    def close(self) -> None:
        for w in self._workers:  # ask all first, so they exit in parallel
            try:
                w.conn.send(None)
            except (BrokenPipeError, OSError):
                pass
        for w in self._workers:
            w.stop()
        self._workers.clear()

    def __enter__(self) -> ProcessPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
