"""Per-minute limits: a token bucket shared by every thread and event loop of this process, or, inside
Ray, by every process and node of the cluster (one named actor per endpoint and limit)."""

from __future__ import annotations

import functools
import inspect
import sys
import threading
import time
from collections.abc import Callable
from typing import Any
from typing import TypeVar

__all__ = ["Limiter", "SharedLimiter", "in_ray", "limiter", "paced", "shared_limiter"]


class Limiter:
    """A token bucket of ``per_minute`` units, ``burst`` deep, shared by every thread and event loop of
    this process. :meth:`reserve` takes the units at once (going into debt when the bucket is short) and
    says how long the caller waits before its turn, so the callers queue in the order they reserved."""

    def __init__(self, per_minute: float, burst: float) -> None:
        self.rate = per_minute / 60.0
        self.burst = burst
        self.level = burst
        self.stamp = time.monotonic()
        self.lock = threading.Lock()

    def reserve(self, units: float) -> float:
        """Take ``units``; :returns: the seconds to wait before using them."""
        with self.lock:
            now = time.monotonic()
            self.level = min(self.burst, self.level + (now - self.stamp) * self.rate) - units
            self.stamp = now
            return 0.0 if self.level >= 0 else -self.level / self.rate


_LIMITERS: dict[tuple[str, str, float], Limiter] = {}
_LOCK = threading.RLock()


T = TypeVar("T")


def once(cache: dict[Any, T], key: Any, make: Callable[[], T]) -> T:
    """``cache[key]``, made by ``make()`` the first time (by one thread: what this process shares)."""
    with _LOCK:
        if key not in cache:
            cache[key] = make()
        return cache[key]


def limiter(where: str, unit: str, per_minute: float) -> Limiter:
    """The bucket for ``unit`` (``requests`` or ``tokens``) of ``where`` (an endpoint, a term): requests
    are spaced evenly (no burst), tokens may come a second's worth at once.

    Inside Ray (this process joined a cluster: a driver, a reward worker, a trainer's actor) the bucket
    is the cluster's, one for every process and node
    (:func:`shared_limiter`); else this process's own."""
    burst = 1.0 if unit == "requests" else per_minute / 60.0
    if in_ray():
        return shared_limiter(where, unit, per_minute, burst)  # type: ignore[return-value]
    return once(_LIMITERS, (where, unit, float(per_minute)), lambda: Limiter(per_minute, burst))


def in_ray() -> bool:
    """Whether this process runs inside Ray (never imports Ray: only a process that did can be)."""
    ray = sys.modules.get("ray")
    try:
        return bool(ray is not None and ray.is_initialized())
    except Exception:  # noqa: BLE001 - a half-imported or stubbed ray
        return False


#: the Ray namespace of the limiter actors (every job of the cluster finds them there)
NAMESPACE = "rewardhub"
#: seconds one reserve() round trip may take before this process falls back to its own bucket
_RESERVE_TIMEOUT_S = 30.0


class _Bucket:
    """The actor: a :class:`Limiter` whose :meth:`reserve` every process of the cluster calls."""

    def __init__(self, per_minute: float, burst: float) -> None:
        self.limiter = Limiter(per_minute, burst)

    def reserve(self, units: float) -> float:
        return self.limiter.reserve(units)


class SharedLimiter:
    """A :class:`Limiter` as callers see it, whose bucket is the cluster's actor; should that actor be
    unreachable, the process's own bucket takes over (said once)."""

    def __init__(self, actor: Any, fallback: Limiter, name: str) -> None:
        self.actor, self.fallback, self.name = actor, fallback, name
        self.broken = False

    def reserve(self, units: float) -> float:
        """Take ``units`` from the cluster's bucket; :returns: the seconds to wait before using them."""
        if not self.broken:
            import ray

            try:
                return float(ray.get(self.actor.reserve.remote(units), timeout=_RESERVE_TIMEOUT_S))
            except Exception as exc:  # noqa: BLE001 - the actor died, or Ray went away
                self.broken = True
                on_its_own(f"rate limiter {self.name}", exc)
        return self.fallback.reserve(units)


def on_its_own(what: str, exc: BaseException) -> None:
    """Say (once per limit) that the cluster's ``what`` is out of reach and this process keeps to it alone."""
    import logging  # only here: logging costs every CLI start ~4 ms

    logging.getLogger("rewardhub.ratelimit").warning(
        "the cluster's %s cannot be reached (%s); this process keeps to the limit on its own from now on",
        what, type(exc).__name__)


def named_actor(cls: type, prefix: str, key: Any, *args: Any, **options: Any) -> Any:
    """A detached Ray actor of ``cls`` named after ``prefix`` and ``key`` (created by the first process
    that asks, found by name by the others), with no CPU of its own: it outlives the job (it holds a few
    numbers) so that every run on the cluster shares it."""
    import hashlib

    import ray

    digest = hashlib.sha256(repr(key).encode()).hexdigest()[:24]
    return ray.remote(cls).options(name=f"{prefix}-{digest}", namespace=NAMESPACE, lifetime="detached",
                                   get_if_exists=True, num_cpus=0, max_restarts=-1, **options).remote(*args)


_SHARED: dict[tuple[str, str, float], SharedLimiter] = {}


def shared_limiter(where: str, unit: str, per_minute: float, burst: float) -> SharedLimiter:
    """The cluster's bucket for ``unit`` of ``where`` at ``per_minute``: a :func:`named_actor`."""
    key = (where, unit, float(per_minute))
    return once(_SHARED, key, lambda: SharedLimiter(
        named_actor(_Bucket, f"rewardhub-limit-{unit}", key, per_minute, burst), Limiter(per_minute, burst),
        f"{unit} of {where}"))


def paced(fn: Callable[..., Any], where: str, max_rpm: float) -> Callable[..., Any]:
    """``fn`` (a reward; sync or async), each call of it first waiting for its turn under ``where``'s
    ``max_rpm`` (a term's). The wait counts toward the call's timeout_s: at most max_concurrency turns
    are taken ahead of it. The signature is ``fn``'s, so it is called as ``fn`` would be."""
    bucket = limiter(where, "requests", max_rpm)
    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None)):
        @functools.wraps(fn)
        async def run_async(*args: Any, **kwargs: Any) -> Any:
            import asyncio

            await asyncio.sleep(bucket.reserve(1))
            return await fn(*args, **kwargs)
        return run_async

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        time.sleep(bucket.reserve(1))
        return fn(*args, **kwargs)
    return run
