"""What the process pool is given to do: a reward's payload (how a worker rebuilds it) and its calls."""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field
from typing import Any

__all__ = ["Task", "WorkerPayload"]


@dataclass(frozen=True)
class WorkerPayload:
    """What a worker needs to rebuild a reward by itself: names and specs, never callables."""

    target: str
    sha256: str | None
    params: tuple[tuple[str, Any], ...]
    kind: str
    adapter: str
    name: str
    #: the worker's data-segment limit while it runs this reward
    memory_limit_mb: int | None = None
    #: at most this many of its calls at once (None: as many as the pool has workers)
    max_concurrency: int | None = None


@dataclass
class Task:
    """One call: a sample (``mode == "one"``) or a list of samples (``"many"``).

    :ivar attempts: how many times it was actually started.
    :ivar result: ``(status, value or error text, latency seconds)`` once done.
    """

    key: str
    mode: str
    payload: Any  # a sample dict, or a list of them
    kwargs: dict[str, Any]
    timeout_s: float | None
    retries: int = 0
    attempts: int = 0
    tag: Any = None  # the caller's bookkeeping (indices)
    result: tuple[str, Any, float] | None = field(default=None)
    #: the pool's record of the caller whose batch holds it (callers in several threads share a pool)
    owner: Any = field(default=None, repr=False, compare=False)
