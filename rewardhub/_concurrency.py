"""Requests in flight to one endpoint: at most ``limit`` at once in this process (all its threads and
event loops together), or, inside Ray, across every process and node of the cluster (one named actor per
endpoint and limit).

The cluster's slots are leases: a process renews the leases it holds every :data:`LEASE_S` / 3 seconds
from a thread of its own, so a process that dies (killed, its node gone) stops renewing and its slots
come back after at most :data:`LEASE_S` seconds. A caller that stops waiting (its call timed out or was
cancelled) tells the actor, which then never grants that turn.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextlib import suppress
from typing import Any

from ._ratelimit import in_ray
from ._ratelimit import named_actor
from ._ratelimit import on_its_own
from ._ratelimit import once

__all__ = ["LEASE_S", "ProcessGate", "SharedSlots", "slot"]

#: seconds a slot stays held without its holder's renewal (a dead holder's slots come back by then)
LEASE_S = 15.0
#: seconds between two looks at the leases while waiting (expired leases are found this often)
_TICK_S = 0.5

_LOCAL: dict[tuple[str, int], ProcessGate] = {}


@asynccontextmanager
async def slot(where: str, limit: int) -> AsyncIterator[None]:
    """Hold one of ``limit`` slots of ``where`` (an endpoint's URL) for the ``async with`` block: the
    cluster's (:class:`SharedSlots`) inside Ray, else this process's (:class:`ProcessGate`)."""
    limit = max(1, int(limit))
    shared = shared_slots(where, limit) if in_ray() else None
    if shared is not None and not shared.broken:
        token = await shared.acquire()
        if token is not None:
            try:
                yield
            finally:
                shared.release(token)
            return
    gate = once(_LOCAL, (where, limit), lambda: ProcessGate(limit))
    await gate.acquire()
    try:
        yield
    finally:
        gate.release()


class ProcessGate:
    """``limit`` slots shared by every thread and event loop of this process (a runner may run calls on
    several loops: one per thread once a blocking call holds the first)."""

    def __init__(self, limit: int) -> None:
        self.limit, self.held = limit, 0
        self.waiters: deque[tuple[Any, Any]] = deque()  # (loop, future), first come first woken
        self.lock = threading.Lock()

    async def acquire(self) -> None:
        import asyncio

        loop = asyncio.get_running_loop()
        while True:
            with self.lock:
                if self.held < self.limit:
                    self.held += 1
                    return
                entry = (loop, loop.create_future())
                self.waiters.append(entry)
            try:
                await entry[1]
            except asyncio.CancelledError:
                with self.lock:
                    woken = entry not in self.waiters
                    if not woken:
                        self.waiters.remove(entry)
                if woken:  # the wake-up it took goes to the next in line
                    self._wake_next()
                raise

    def release(self) -> None:
        with self.lock:
            self.held -= 1
        self._wake_next()

    def _wake_next(self) -> None:
        with self.lock:
            while self.waiters:
                loop, fut = self.waiters.popleft()
                try:
                    loop.call_soon_threadsafe(_wake, fut)
                    return
                except RuntimeError:  # that loop is closed: the next one
                    continue


def _wake(fut: Any) -> None:
    if not fut.done():
        fut.set_result(None)


class _Slots:
    """The actor: ``limit`` slots, each a lease ``token -> (holder, deadline)``; an async actor, so many
    callers wait at once."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.leases: dict[str, tuple[str, float]] = {}
        self.dropped: set[str] = set()  # turns given up before they were granted
        self.peak = 0
        self._cond: Any = None

    def _expire(self) -> None:
        now = time.monotonic()
        for token in [t for t, (_, end) in self.leases.items() if end < now]:
            del self.leases[token]

    async def acquire(self, token: str, holder: str, lease_s: float) -> bool:
        """Wait for a free slot and lease it to ``token``; ``False``: the caller gave up first."""
        import asyncio

        if self._cond is None:
            self._cond = asyncio.Condition()
        async with self._cond:
            while True:
                if token in self.dropped:
                    self.dropped.discard(token)
                    return False
                self._expire()
                if len(self.leases) < self.limit:
                    self.leases[token] = (holder, time.monotonic() + lease_s)
                    self.peak = max(self.peak, len(self.leases))
                    return True
                with suppress(TimeoutError):
                    await asyncio.wait_for(self._cond.wait(), timeout=_TICK_S)

    async def release(self, token: str) -> None:
        """Give back ``token``'s slot (or, not granted yet, its turn)."""
        if self.leases.pop(token, None) is None:
            self.dropped.add(token)
        if self._cond is not None:
            async with self._cond:
                self._cond.notify()

    async def renew(self, holder: str, lease_s: float) -> int:
        """Extend every lease of ``holder``; :returns: how many it holds."""
        end = time.monotonic() + lease_s
        mine = [t for t, (h, _) in self.leases.items() if h == holder]
        for t in mine:
            self.leases[t] = (holder, end)
        return len(mine)

    async def state(self) -> dict[str, int]:
        self._expire()
        return {"limit": self.limit, "held": len(self.leases), "peak": self.peak}


#: this process, as the holder of its leases
HOLDER = f"{os.uname().nodename}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class SharedSlots:
    """One endpoint's cluster slots as this process sees them: leases taken and renewed here; should
    the actor be unreachable, this process keeps to the limit on its own (said once)."""

    def __init__(self, actor: Any, name: str) -> None:
        self.actor, self.name = actor, name
        self.broken = False
        self.held: set[str] = set()
        self._lock = threading.Lock()

    async def acquire(self) -> str | None:
        """A lease's token once a slot is ours (``None``: the actor is gone; the local gate takes over)."""
        import asyncio

        token = uuid.uuid4().hex
        ref = self.actor.acquire.remote(token, HOLDER, LEASE_S)
        try:
            granted = await ref
        except asyncio.CancelledError:  # the call timed out or was cancelled while waiting its turn
            self._release_quietly(token)
            raise
        except Exception as exc:  # noqa: BLE001 - the actor died, or Ray went away
            self._give_up(exc)
            return None
        if not granted:
            return None
        with self._lock:
            self.held.add(token)
        _renewer.watch(self)
        return token

    def release(self, token: str) -> None:
        with self._lock:
            self.held.discard(token)
        self._release_quietly(token)

    def _release_quietly(self, token: str) -> None:
        with suppress(Exception):  # the lease expires on its own
            self.actor.release.remote(token)

    def renew(self) -> None:
        with self._lock:
            if not self.held:
                return
        try:
            self.actor.renew.remote(HOLDER, LEASE_S)
        except Exception as exc:  # noqa: BLE001
            self._give_up(exc)

    def _give_up(self, exc: BaseException) -> None:
        if not self.broken:
            self.broken = True
            on_its_own(f"concurrency limit {self.name}", exc)


class _Renewer:
    """One daemon thread per process that renews the leases of every :class:`SharedSlots` in use."""

    def __init__(self) -> None:
        self.watched: list[SharedSlots] = []
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def watch(self, slots: SharedSlots) -> None:
        with self._lock:
            if slots not in self.watched:
                self.watched.append(slots)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="rewardhub-leases", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            time.sleep(LEASE_S / 3)
            with self._lock:
                watched = list(self.watched)
            for s in watched:
                s.renew()


_renewer = _Renewer()
_SHARED: dict[tuple[str, int], SharedSlots] = {}


def shared_slots(where: str, limit: int) -> SharedSlots:
    """The cluster's ``limit`` slots of ``where``: a :func:`~rewardhub._ratelimit.named_actor` (async)."""

    def make() -> SharedSlots:
        shared = SharedSlots(None, f"max_concurrency {limit} of {where}")
        try:
            shared.actor = named_actor(_Slots, "rewardhub-slots", (where, limit), limit,
                                       max_concurrency=10_000)
        except Exception as exc:  # noqa: BLE001 - Ray refused the actor
            shared._give_up(exc)
        return shared

    return once(_SHARED, (where, int(limit)), make)
