"""Recent requests by their ``Idempotency-Key``: a request sent again is answered, never scored twice.

A client that lost an answer (its read timed out, the connection broke) sends the same request again
with the same key. While the first copy is being scored, the copy sent again waits for it (the
scoring goes on when the first connection is gone); once it is scored, the copy gets the stored
answer. A key sent again with another body is refused, as the IETF draft "The Idempotency-Key HTTP
Header Field" has it. Failures are not kept: a request that failed is scored anew when sent again.
Answers are kept ``keep_s`` seconds, and at most ``max_rows`` rows in all (the oldest go first).
Everything here runs on the server's event loop, so it needs no lock.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import OrderedDict
from collections.abc import Awaitable
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field
from typing import Any
from typing import Generic
from typing import TypeVar

from ..errors import UsageError

__all__ = ["RecentRequests"]

_T = TypeVar("_T")

#: the longest key taken (a UUID is 32 to 36 characters)
MAX_KEY = 200


@dataclass
class _Entry(Generic[_T]):
    digest: str
    rows: int
    task: asyncio.Task[_T]
    done_at: float | None = None
    since: float = field(default_factory=time.monotonic)


class RecentRequests(Generic[_T]):
    """The answers of the requests that carried a key, by key (see the module's doc)."""

    def __init__(self, *, keep_s: float = 600.0, max_rows: int = 65536) -> None:
        self.keep_s = keep_s
        self.max_rows = max_rows
        self._entries: OrderedDict[str, _Entry[_T]] = OrderedDict()
        self._kept_rows = 0
        #: requests answered from a copy scored or being scored (for /metrics and the tests)
        self.replayed = 0

    async def answer(self, key: str | None, body: bytes, rows: int, score: Callable[[], Awaitable[_T]]) -> _T:
        """The answer to a request of ``rows`` rows and raw ``body``: ``score()``'s, once per ``key``.

        :raises UsageError: the key is too long, or was sent before with another body.
        """
        if key is None:
            return await score()
        if not key or len(key) > MAX_KEY:
            raise UsageError(f"the Idempotency-Key header must have 1 to {MAX_KEY} characters")
        self._expire()
        digest = hashlib.sha256(body).hexdigest()
        entry = self._entries.get(key)
        if entry is not None and entry.digest != digest:
            raise UsageError(f"the Idempotency-Key {key!r} came before with another body\n"
                             "send a new key with each new request (the same key only when sending it again)")
        if entry is None:
            entry = _Entry(digest, rows, asyncio.ensure_future(score()))
            self._entries[key] = entry
            entry.task.add_done_callback(lambda task: self._finished(key, entry))
        else:
            self.replayed += 1
        # shielded: a client that goes away does not cancel what its copy sent again waits for
        return await asyncio.shield(entry.task)

    def state(self, key: str) -> dict[str, Any]:
        """What this server has of the request sent with ``key`` (``GET /health?request=KEY``):
        ``{"state": "scoring"|"answered"|"unknown", "rows": N, "seconds": since received}``."""
        entry = self._entries.get(key)
        if entry is None:
            return {"state": "unknown"}
        return {"state": "answered" if entry.task.done() else "scoring", "rows": entry.rows,
                "seconds": round(time.monotonic() - entry.since, 1)}

    def _finished(self, key: str, entry: _Entry[_T]) -> None:
        if entry.task.cancelled() or entry.task.exception() is not None:
            if self._entries.get(key) is entry:
                del self._entries[key]
            return
        entry.done_at = time.monotonic()
        self._kept_rows += entry.rows
        self._expire()

    def _expire(self) -> None:
        """Forget answers older than ``keep_s``, then the oldest answers past ``max_rows`` rows in all."""
        now = time.monotonic()
        for key, entry in list(self._entries.items()):
            if entry.done_at is None:
                continue
            if now - entry.done_at > self.keep_s or self._kept_rows > self.max_rows:
                del self._entries[key]
                self._kept_rows -= entry.rows
