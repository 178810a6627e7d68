"""The server's connections, bounded: a client that opens connections and never finishes a request's
headers cannot shut the others out.

aiohttp waits for a request's headers for as long as the client likes, and accepts connections until
the process runs out of file descriptors; then every ``accept()`` fails (and asyncio logs a traceback
for each try, thousands a second). :class:`ConnectionGate` wraps aiohttp's protocol and

- closes a connection that has not sent a request's headers within ``header_timeout`` seconds of
  opening or of its previous request (``--read-timeout``),
- keeps at most ``limit`` connections open (below the descriptor limit, which it raises to the hard
  limit): at the limit, a new connection takes the place of the one that has waited longest without
  sending its headers, so a client that sends its request at once is served;
- counts what it closed (``rewardhub_connections_closed_total``) and says so in the log at most once
  a minute, with no traceback; so too a request whose headers aiohttp refuses (:func:`quiet_bad_requests`).
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Callable
from typing import Any

__all__ = ["BACKLOG", "IN_FLIGHT", "ConnectionGate", "EveryMinute", "accept_errors_quietly",
           "connection_limit", "quiet_bad_requests"]

#: the listening socket's backlog, and how many connections asyncio accepts in one turn of its loop
BACKLOG = 128
#: backlogs' worth of descriptors a full one can hold beyond the limit: a connection accepted in one turn
#: reaches the gate two turns later (a task makes its transport, which then calls ``connection_made``),
#: and the one it evicts closes a turn after that; a client that keeps the backlog full meanwhile has
#: three turns' accepts open at once
IN_FLIGHT = 3


class EveryMinute:
    """``due()`` is True at the first call, then at most once a minute (a warning that repeats per
    request or per connection must not flood the log)."""

    def __init__(self) -> None:
        self._last: float | None = None

    def due(self) -> bool:
        now = time.monotonic()
        if self._last is not None and now - self._last < 60.0:
            return False
        self._last = now
        return True


def connection_limit(wanted: int) -> int:
    """``wanted``, or fewer where the file-descriptor limit (raised to its hard limit first) would not
    leave :data:`IN_FLIGHT` backlogs, and a quarter of it (at least 64) for everything else: the pool's
    pipes, the log, the rewards. Before, it left one backlog: a loaded host, where the server does not
    get a turn for each connection, ran it out of descriptors."""
    try:
        import resource
    except ImportError:  # not on this platform
        return wanted
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(8, min(wanted, soft - max(64, soft // 4) - IN_FLIGHT * BACKLOG))


class _Conn(asyncio.Protocol):
    """One connection: aiohttp's protocol (``inner``) behind it, and since when it has been waiting
    for a request's headers (None while a request is read or answered)."""

    def __init__(self, inner: Any, gate: ConnectionGate) -> None:
        self.inner = inner
        self.gate = gate
        self.transport: asyncio.Transport | None = None
        self.waiting_since: float | None = time.monotonic()
        self._tail = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.gate.opened(self)
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self.waiting_since is not None:
            seen = self._tail + data
            if b"\r\n\r\n" in seen:  # the headers are complete; the handler takes it from here
                self.waiting_since = None
                self._tail = b""
            else:
                self._tail = seen[-3:]
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()  # type: ignore[no-any-return]

    def connection_lost(self, exc: Exception | None) -> None:
        self.gate.closed(self)
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


class ConnectionGate:
    """Counts, times out and bounds the connections of one listening server.

    :param factory: aiohttp's protocol factory (``AppRunner.server``).
    :param on_close: called with the reason of each connection it closes (``header_timeout``, ``limit``).
    """

    def __init__(self, factory: Callable[[], Any], limit: int, header_timeout: float,
                 on_close: Callable[[str], None]) -> None:
        self.factory = factory
        self.limit = limit
        self.header_timeout = header_timeout
        self.on_close = on_close
        #: the open connections, by their transport (what the middleware knows a request by)
        self._conns: dict[Any, _Conn] = {}
        self._sweeper: asyncio.Task[None] | None = None

    def __call__(self) -> asyncio.Protocol:
        """A protocol for a new connection (what ``loop.create_server`` calls)."""
        return _Conn(self.factory(), self)

    def __len__(self) -> int:
        return len(self._conns)

    # ---- the connections' side ---------------------------------------------------------------
    def opened(self, conn: _Conn) -> None:
        self._conns[conn.transport] = conn
        if len(self._conns) > self.limit:
            waiting = [c for c in self._conns.values() if c.waiting_since is not None and c is not conn]
            victim = min(waiting, key=lambda c: c.waiting_since or 0.0) if waiting else conn
            self._close(victim, "limit")

    def closed(self, conn: _Conn) -> None:
        self._conns.pop(conn.transport, None)

    # ---- the handlers' side (the app's middleware) --------------------------------------------
    def request_started(self, transport: Any) -> None:
        conn = self._conns.get(transport)
        if conn is not None:
            conn.waiting_since = None

    def request_done(self, transport: Any) -> None:
        conn = self._conns.get(transport)
        if conn is not None:
            conn.waiting_since = time.monotonic()

    # ---- the clock -------------------------------------------------------------------------
    def start(self) -> None:
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep())

    def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(min(1.0, self.header_timeout / 4))
            now = time.monotonic()
            for conn in list(self._conns.values()):
                since = conn.waiting_since
                if since is None or now - since < self.header_timeout:
                    continue
                if conn.transport is not None and conn.transport.get_write_buffer_size():
                    continue  # still sending its last answer to a slow reader
                self._close(conn, "header_timeout")

    def _close(self, conn: _Conn, reason: str) -> None:
        self.closed(conn)
        if conn.transport is not None:
            conn.transport.abort()
        self.on_close(reason)


def accept_errors_quietly(log: EveryMinute) -> Callable[[asyncio.AbstractEventLoop, dict[str, Any]], None]:
    """An event-loop exception handler that reports a failing ``accept()`` (no file descriptor left)
    as one line a minute, not a traceback per try; anything else goes to asyncio's default handler."""

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if str(context.get("message", "")).startswith("socket.accept() out of system resource"):
            if log.due():
                print(f"rewardhub serve: WARNING: cannot accept connections: {context.get('exception')} "
                      "(this line comes at most once a minute)", file=sys.stderr, flush=True)
            return
        loop.default_exception_handler(context)

    return handler


def quiet_bad_requests(on_bad: Callable[[str], None]) -> logging.Logger:
    """A logger for aiohttp's server (``AppRunner(logger=...)``) that hands a request aiohttp's HTTP
    parser refused (a header line over 8,190 bytes, over 128 headers, a broken request line: aiohttp
    answers each 400 and closes the connection) to ``on_bad`` with its reason's first line, instead of
    logging a traceback for it; anything else is logged as before."""
    from aiohttp.http_exceptions import HttpProcessingError

    def keep(record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError):
            lines = [s.strip() for s in str(exc.message).splitlines() if s.strip()]
            on_bad((lines[0] if lines else type(exc).__name__)[:120])
            return False
        return True

    logger = logging.Logger("rewardhub.serve.http")  # its own: aiohttp's logger stays as it is
    logger.addFilter(keep)
    return logger
