"""A client waiting for a ``rewardhub serve`` answer learns whether the server is alive and at work on it.

A scoring request may take minutes (``reward.remote.timeout_s``, 600 s by default), and a server that
hangs or stopped looks, from the waiting side, like one that is still scoring. While a request
waits, :class:`LivenessProbe` asks the server ``GET /health?request=KEY`` (``KEY``: the request's
``Idempotency-Key``) every :data:`PROBE_EVERY_S` seconds, the first time that long after the request
was sent (an answer that comes sooner costs no probe), and says what it learns on stderr:

- the server has the request (received, not yet answered): one line, with how long ago it was
  received and the call slots it has busy;
- the server is alive but ``stuck`` (every call slot busy past ``--stuck-after``), draining, or does
  not know the request: a ``WARNING:`` line naming the server and what it said;
- the server does not answer ``/health`` within :data:`PROBE_TIMEOUT_S`: a ``WARNING:`` line naming it;
  after :data:`DEAD_AFTER` such probes in a row the request's try is ended (``aborted`` says why), so
  that the client's retries (:class:`~._http.Retrying`) take over rather than wait out ``timeout_s``.

Of the answers, a line comes again when what the server says changes, else at most once a minute.
"""

from __future__ import annotations

import http.client
import json
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable
from collections.abc import Mapping
from typing import Any

__all__ = ["DEAD_AFTER", "PROBE_EVERY_S", "PROBE_TIMEOUT_S", "LivenessProbe"]

#: seconds between two probes of a server while a request waits (the first: that long after sending)
PROBE_EVERY_S = 20.0
#: seconds one probe waits for ``/health``'s answer
PROBE_TIMEOUT_S = 10.0
#: probes in a row without an answer after which the request's try is ended
DEAD_AFTER = 3
#: seconds between two lines saying that the server is at work on the request
SAY_EVERY_S = 60.0


class LivenessProbe:
    """Probes ``url`` while one request (``method path`` with ``key``) waits; see the module's doc."""

    def __init__(self, url: str, what: str, key: str, headers: Mapping[str, str], *,
                 every_s: float = PROBE_EVERY_S, probe_timeout_s: float = PROBE_TIMEOUT_S) -> None:
        self.url, self.what, self.key = url, what, key
        self.headers = {k: v for k, v in headers.items() if k.lower() == "authorization"}
        self.every_s, self.probe_timeout_s = every_s, probe_timeout_s
        #: why the request's try was ended (None: it was not)
        self.aborted: str | None = None
        #: the probes made, and what the last one learnt (for the tests and the logs)
        self.probes = 0
        self.last: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, abort: Callable[[], None]) -> None:
        """Probe on a thread of its own until :meth:`stop`; ``abort()`` ends the request's try."""
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._run, args=(abort,), name="rewardhub-liveness",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """No more probes or lines (a probe under way ends by its own timeout; nothing waits for it)."""
        self._stop.set()

    def _run(self, abort: Callable[[], None]) -> None:
        failed = 0
        said_at: float | None = None
        said_kind: tuple[Any, Any] | None = None
        while not self._stop.wait(self.every_s):
            waited = time.monotonic() - self._started
            self.probes += 1
            try:
                health = self._probe()
            except (OSError, http.client.HTTPException, ValueError) as exc:
                failed += 1
                self.last = "no answer"
                if self._stop.is_set():
                    return
                if failed >= DEAD_AFTER:
                    self.aborted = (f"the server did not answer GET /health in {failed} probes over "
                                    f"{waited:.0f} s while {self.what} waited ({self._why(exc)}): it is hung "
                                    "or gone")
                    _say(f"WARNING: reward server {self.url}: {self.aborted}; ending this try")
                    abort()
                    return
                _say(f"WARNING: reward server {self.url}: no answer to GET /health ({self._why(exc)}) "
                     f"while {self.what} has waited {waited:.0f} s: it may be hung or gone (the try "
                     f"ends after {DEAD_AFTER} such probes in a row)")
                continue
            failed = 0
            line, worry = _reading(health, self.what, waited)
            self.last = line
            if self._stop.is_set():
                return
            now = time.monotonic()
            kind = (health.get("status"), (health.get("request") or {}).get("state")
                    if isinstance(health.get("request"), Mapping) else None)
            if kind != said_kind or said_at is None or now - said_at >= SAY_EVERY_S:  # news, or a minute
                said_at, said_kind = now, kind
                _say(f"{'WARNING: ' if worry else ''}reward server {self.url}: {line}")

    def _why(self, exc: BaseException) -> str:
        if isinstance(exc, TimeoutError):
            return f"none within {self.probe_timeout_s:g} s"
        return f"{type(exc).__name__}: {exc}"[:200]

    def _probe(self) -> Mapping[str, Any]:
        """``GET /health?request=KEY``'s JSON (any status: a 503 says stuck or draining)."""
        parts = urllib.parse.urlsplit(self.url)
        cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        conn = cls(parts.hostname or "", parts.port, timeout=self.probe_timeout_s)
        try:
            path = parts.path.rstrip("/") + "/health?request=" + urllib.parse.quote(self.key)
            conn.request("GET", path, headers=self.headers)
            resp = conn.getresponse()
            data = resp.read(1 << 20)
        finally:
            conn.close()
        body = json.loads(data.decode("utf-8"))
        if not isinstance(body, Mapping):
            raise ValueError(f"GET /health answered {resp.status} with no JSON object")
        return body


def _reading(health: Mapping[str, Any], what: str, waited: float) -> tuple[str, bool]:
    """What ``/health`` says about the request, and whether it is a worry."""
    status = health.get("status")
    got, calls = health.get("request"), health.get("busy_calls")
    mine: Mapping[str, Any] = got if isinstance(got, Mapping) else {}
    busy: list[Any] = calls if isinstance(calls, list) else []
    slots = f"{len(busy)} of {health.get('max_calls', '?')} call slots busy"
    if busy and isinstance(busy[0], Mapping):
        slots += f", the longest for {busy[0].get('seconds', '?')} s"
    state = mine.get("state")
    if status == "stuck":
        return (f"{what} has waited {waited:.0f} s, and the server says it is stuck: {health.get('error')}",
                True)
    if status == "draining":
        return f"{what} has waited {waited:.0f} s, and the server is draining (shutting down)", True
    if state == "scoring":
        return (f"alive, and has {what} ({mine.get('rows', '?')} rows, received {mine.get('seconds', '?')} s "
                f"ago; {slots}); still waiting for its answer"), False
    if state == "answered":
        return f"{what} is answered; its answer is on its way", False
    return (f"alive, but it does not know {what}, which has waited {waited:.0f} s ({slots}): its body may "
            "still be on its way, the server lost it, or it is older than this client"), True


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
