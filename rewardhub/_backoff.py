"""One back-off schedule for every client that retries a server: the judge's endpoint and a
``reward.remote`` server. A try ``n`` (0 first) that failed waits ``first_s * 2**n`` seconds, at most
``max_s``; a server's ``Retry-After`` (in seconds: the form these servers send) lengthens the wait up to
``max_s``, never shortens it. No jitter: two runs of the same failures wait the same."""

from __future__ import annotations

import math

__all__ = ["backoff_wait", "retry_after_s"]


def retry_after_s(value: str | None) -> float | None:
    """A ``Retry-After`` header in seconds (``None``: absent, an HTTP date, or not a finite number)."""
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and math.isfinite(seconds) and seconds >= 0 else None


def backoff_wait(attempt: int, first_s: float, max_s: float, retry_after: float | None = None) -> float:
    """Seconds to wait after failed try ``attempt`` (0 first)."""
    wait = min(first_s * 2.0 ** min(attempt, 60), max_s)
    return max(wait, min(retry_after, max_s)) if retry_after is not None else wait
