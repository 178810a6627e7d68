"""One HTTP request to a ``rewardhub serve`` server, bounded in time and retried through failures that pass.

:func:`exchange` makes one request (standard library ``http.client``): the connection must open within
``connect_timeout_s`` and the whole answer must be there within ``timeout_s`` (a deadline, not a
per-read timeout, so a server that trickles bytes cannot hold a caller for longer). A failure that may
pass (no connection, a connection cut, an answer cut short or late, and 408, 429, 502, 503, 504: what a
restarting, draining or overloaded server or its proxy answers) is a :class:`Transient`.

:class:`Retrying` sends a request again after a :class:`Transient`, with backoff (0.5 s doubling to
10 s), for ``retry_for_s`` seconds from the first failure, with one ``WARNING:`` line per retry naming
the server and why; then it raises one :class:`ServerUnavailable`. While a ``POST`` waits for its
answer, a :class:`~._liveness.LivenessProbe` asks the server's ``/health`` about it and says what it
learns; a server that stops answering ends the try (a :class:`Transient`) long before ``timeout_s``.
Each request carries an ``Idempotency-Key`` that its retries repeat, so a server that already scored
it (or is scoring it) answers from that, and a retry never scores the rows twice.
"""

from __future__ import annotations

import contextlib
import http.client
import sys
import time
import urllib.parse
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..._backoff import backoff_wait
from ..._backoff import retry_after_s
from ...errors import RewardhubError
from ._liveness import PROBE_EVERY_S
from ._liveness import PROBE_TIMEOUT_S
from ._liveness import LivenessProbe

__all__ = ["IDEMPOTENCY_HEADER", "TOKEN_LABEL", "Answer", "Retrying", "ServerUnavailable", "Transient",
           "exchange"]

#: the header that names a request, repeated by its retries (the IETF draft's name for it)
IDEMPOTENCY_HEADER = "Idempotency-Key"
#: what stands for the bearer token (``$REWARDHUB_SERVE_TOKEN``) in any text taken from an answer
TOKEN_LABEL = "<serve token>"

#: statuses a retry may cure: timeout, too many requests, a proxy's bad gateway, unavailable (the server
#: drains or starts), a proxy's gateway timeout
RETRY_STATUSES = frozenset({408, 429, 502, 503, 504})

#: the first and the longest wait between tries, seconds
BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 10.0


@dataclass(frozen=True)
class Answer:
    status: int
    content_type: str
    body: bytes


class Transient(Exception):
    """A failure that may pass: the request is worth sending again. ``why`` says what happened."""

    def __init__(self, why: str, retry_after: float | None = None, *, late: bool = False) -> None:
        super().__init__(why)
        self.why = why
        #: the server's ``Retry-After``, seconds
        self.retry_after = retry_after
        #: the answer was not all there within the timeout
        self.late = late


class ServerUnavailable(RewardhubError):
    """The server did not answer through every retry of ``retry_for_s``."""

    def __init__(self, message: str, *, url: str, tries: int, seconds: float, last: str) -> None:
        super().__init__(message)
        self.url = url
        self.tries = tries
        self.seconds = seconds
        #: what the last try met
        self.last = last


def exchange(url: str, method: str, path: str, body: bytes | None, headers: Mapping[str, str], *,
             connect_timeout_s: float, timeout_s: float, watch: LivenessProbe | None = None) -> Answer:
    """One request to ``url + path``; its answer (any status but those of :data:`RETRY_STATUSES`).

    :param watch: probes the server while the answer is awaited, and may end the try (:mod:`._liveness`).
    :raises Transient: no connection within ``connect_timeout_s``, no whole answer within
        ``timeout_s``, a connection cut, the server found hung or gone by ``watch``, or a status of
        :data:`RETRY_STATUSES`.
    """
    parts = urllib.parse.urlsplit(url)
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = cls(parts.hostname or "", parts.port, timeout=connect_timeout_s)
    deadline = time.monotonic() + timeout_s
    try:
        try:
            conn.connect()
        except TimeoutError:
            raise Transient(f"no connection within {connect_timeout_s:g} s (reward.remote.connect_timeout_s)"
                            ) from None
        except OSError as exc:
            raise Transient(f"cannot connect: {exc.strerror or exc}") from None
        sock = conn.sock
        if watch is not None:
            watch.start(lambda: _cut(sock))
        try:
            chunks, resp = _answer(conn, sock, method, parts.path.rstrip("/") + path, body, headers, deadline)
        except (http.client.HTTPException, OSError) as exc:
            if watch is not None and watch.aborted is not None:  # the watch cut the connection
                raise Transient(watch.aborted) from None
            if isinstance(exc, TimeoutError):
                raise Transient(f"no answer within {timeout_s:g} s", late=True) from None
            if isinstance(exc, http.client.IncompleteRead):
                more = f", {exc.expected} more expected" if exc.expected is not None else ""
                raise Transient(f"the answer was cut short ({len(exc.partial)} bytes{more})") from None
            raise Transient(f"the connection broke: {type(exc).__name__}: {exc}") from None
    finally:
        if watch is not None:
            watch.stop()
        conn.close()
    data = b"".join(chunks)
    if resp.status in RETRY_STATUSES:
        reason = reason_of(data)
        raise Transient(f"answered {resp.status} {resp.reason}{'' if reason is None else ': ' + reason}",
                        retry_after_s(resp.getheader("Retry-After")))
    return Answer(resp.status, resp.getheader("Content-Type") or "", data)


def _answer(conn: http.client.HTTPConnection, sock: Any, method: str, path: str, body: bytes | None,
            headers: Mapping[str, str], deadline: float) -> tuple[list[bytes], http.client.HTTPResponse]:
    """Send the request and read its whole answer by ``deadline``: (the body's chunks, the response)."""
    _until(sock, deadline)
    conn.request(method, path, body=body, headers=dict(headers))
    resp = conn.getresponse()
    chunks = []
    while True:
        _until(sock, deadline)
        chunk = resp.read1(1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    if resp.length:  # the connection ended before the length the answer announced
        raise http.client.IncompleteRead(b"".join(chunks), resp.length)
    return chunks, resp


def _cut(sock: Any) -> None:
    """End a request's connection from another thread (its reader wakes with an error)."""
    import socket

    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def _until(sock: Any, deadline: float) -> None:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    sock.settimeout(left)


def reason_of(body: bytes) -> str | None:
    """``REASON`` of a ``{"error": REASON}`` body, else None."""
    import json

    try:
        reason = json.loads(body).get("error")
    except (ValueError, AttributeError):
        return None
    return reason if isinstance(reason, str) else None


class Retrying:
    """Sends requests to one server through its :class:`Transient` failures (see the module's doc)."""

    def __init__(self, url: str, *, timeout_s: float, connect_timeout_s: float, retry_for_s: float,
                 headers: Mapping[str, str] | None = None) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.retry_for_s = retry_for_s
        self.headers = dict(headers or {})
        #: retries made (every request together), for the tests and the logs
        self.retries = 0
        #: seconds between probes of the server while a POST waits for its answer (:mod:`._liveness`);
        #: None: no probes
        self.probe_every_s: float | None = PROBE_EVERY_S
        self.probe_timeout_s = PROBE_TIMEOUT_S
        #: the last try's watch (for the tests)
        self.watch: LivenessProbe | None = None

    def request(self, method: str, path: str, body: bytes | None = None) -> Answer:
        """The answer to one request, sent again through transient failures with the same
        :data:`IDEMPOTENCY_HEADER`.

        :raises ServerUnavailable: still failing ``retry_for_s`` seconds after the first failure.
        """
        from ..._secrets import bearer_secrets
        from ..._secrets import redact
        from ..._secrets import redact_bytes

        secrets = bearer_secrets(self.headers)  # a server or proxy may echo them: never kept
        headers = {**self.headers, IDEMPOTENCY_HEADER: uuid.uuid4().hex}
        if body is not None:
            headers["Content-Type"] = "application/json"
        started = time.monotonic()
        first_failure: float | None = None
        tries = 0
        while True:
            now = time.monotonic()
            # a retry waits no longer than the retry window has left (at least a second)
            timeout = self.timeout_s if first_failure is None else max(
                1.0, min(self.timeout_s, first_failure + self.retry_for_s - now))
            tries += 1
            watch = self.watch = None if method != "POST" or self.probe_every_s is None else LivenessProbe(
                self.url, f"{method} {path}", headers[IDEMPOTENCY_HEADER], self.headers,
                every_s=self.probe_every_s, probe_timeout_s=self.probe_timeout_s)
            try:
                answer = exchange(self.url, method, path, body, headers,
                                  connect_timeout_s=self.connect_timeout_s, timeout_s=timeout, watch=watch)
                if secrets:
                    answer = Answer(answer.status, answer.content_type,
                                    redact_bytes(answer.body, secrets, TOKEN_LABEL))
                return answer
            except Transient as exc:
                exc.why = redact(exc.why, secrets, TOKEN_LABEL)
                if exc.late:  # which setting bounded this try
                    exc.why += (" (reward.remote.timeout_s)" if timeout >= self.timeout_s
                                else " (what reward.remote.retry_for_s had left)")
                now = time.monotonic()
                first_failure = now if first_failure is None else first_failure
                left = first_failure + self.retry_for_s - now
                wait = backoff_wait(tries - 1, BACKOFF_FIRST_S, BACKOFF_MAX_S, exc.retry_after)
                if left <= 0:
                    spent = now - started
                    raise ServerUnavailable(
                        f"reward server {self.url}: {method} {path} failed {tries} time(s) in {spent:.0f} s "
                        f"(retried for reward.remote.retry_for_s={self.retry_for_s:g}); the last: {exc.why}\n"
                        "is `rewardhub serve` running there, and is the address right? (a server down "
                        "for longer needs a larger reward.remote.retry_for_s, a slower one "
                        "reward.remote.timeout_s)",
                        url=self.url, tries=tries, seconds=spent, last=exc.why,
                    ) from None
                wait = min(wait, left)  # the last try comes when the window closes
                self.retries += 1
                print(f"WARNING: reward server {self.url}: {method} {path}: {exc.why}; retry {tries} in "
                      f"{wait:.1f} s (gives up {left:.0f} s from now, reward.remote.retry_for_s)",
                      file=sys.stderr, flush=True)
                time.sleep(wait)
