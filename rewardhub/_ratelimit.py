"""Per-minute limits: a token bucket shared by every thread and event loop of this process."""

from __future__ import annotations

import functools
import inspect
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["Limiter", "limiter", "paced"]


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
_LIMITERS_LOCK = threading.Lock()


def limiter(where: str, unit: str, per_minute: float) -> Limiter:
    """The process's bucket for ``unit`` (``requests`` or ``tokens``) of ``where`` (an endpoint, a
    term): requests are spaced evenly (no burst), tokens may come a second's worth at once."""
    with _LIMITERS_LOCK:
        key = (where, unit, float(per_minute))
        if key not in _LIMITERS:
            _LIMITERS[key] = Limiter(per_minute, 1.0 if unit == "requests" else per_minute / 60.0)
        return _LIMITERS[key]


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
