"""Client for a SandboxFusion-style HTTP code runner (``POST .../run_code``), standard library only.

Request: ``{"code", "language", "stdin", "run_timeout", "compile_timeout", "memory_limit_MB",
"files"}``. Response: ``{"status": "Success"|"Failed"|"SandboxError", "message",
"compile_result", "run_result": {"status": "Finished"|"TimeLimitExceeded"|"Error", "return_code",
"stdout", "stderr", "execution_time"}}``.

``max_concurrent`` bounds the requests in flight to one URL across every call in this process
(threads of a thread executor, or the calls of one process worker); connection errors, HTTP 5xx
/ 429 and ``SandboxError`` replies are retried with exponential back-off.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from rewardhub.config.fields import invalid
from rewardhub.errors import UsageError

from .sandbox import RunResult

__all__ = ["RemoteSandbox", "endpoint"]

_LOCK = threading.Lock()
_SEMAPHORES: dict[tuple[str, int], threading.BoundedSemaphore] = {}
#: requests in flight per endpoint in this process (read by the tests)
IN_FLIGHT: dict[str, int] = {}
PEAK: dict[str, int] = {}


def endpoint(url: str) -> str:
    """The run_code endpoint of a configured URL: one with a path as is, a bare host + ``/run_code``."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise invalid("reward.sandbox.url", url, "set it to the SandboxFusion endpoint, e.g. http://host:8080/run_code",
                      "not an http(s) URL")
    if parts.path in ("", "/"):
        return urllib.parse.urlunsplit((parts.scheme, parts.netloc, "/run_code", parts.query, ""))
    return url


def _semaphore(url: str, n: int) -> threading.BoundedSemaphore:
    with _LOCK:
        return _SEMAPHORES.setdefault((url, n), threading.BoundedSemaphore(max(1, n)))


class RemoteSandbox:
    """Runs programs on a SandboxFusion server.

    :param url: ``reward.sandbox.url``.
    :param max_concurrent: requests in flight to this URL from this process.
    :param memory_limit_mb: sent as ``memory_limit_MB``.
    :param retries: extra attempts after a transport failure or a ``SandboxError`` reply.
    :param language: SandboxFusion language name (``python``).
    """

    def __init__(self, url: str, *, max_concurrent: int = 8, memory_limit_mb: int = 1024, retries: int = 2,
                 language: str = "python", backoff_s: float = 0.2) -> None:
        self.url = endpoint(url)
        self.max_concurrent = int(max_concurrent)
        self.memory_limit_mb = int(memory_limit_mb)
        self.retries = max(0, int(retries))
        self.language = language
        self.backoff_s = backoff_s

    def run(self, code: str, *, stdin: str = "", timeout_s: float = 5.0) -> RunResult:
        """Run one program; transport failures after all retries give ``status="sandbox_error"``."""
        body = json.dumps({"code": code, "language": self.language, "stdin": stdin, "run_timeout": timeout_s,
                           "compile_timeout": timeout_s, "memory_limit_MB": self.memory_limit_mb,
                           "files": {}}).encode()
        started = time.monotonic()
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                reply = self._post(body, timeout_s + 30.0)
            except _Retryable as exc:
                last = str(exc)
                continue
            if reply.get("status") == "SandboxError":
                last = f"server reported SandboxError: {str(reply.get('message', ''))[:200]}"
                continue
            return _to_result(reply, time.monotonic() - started)
        return RunResult(status="sandbox_error", stderr=f"rhc-remote: {self.url}: {last} "
                                                          f"(after {self.retries + 1} attempts)",
                         wall_s=time.monotonic() - started, extra={"mode": "remote"})

    def _post(self, body: bytes, timeout: float) -> dict[str, Any]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        req = urllib.request.Request(self.url, data=body, method="POST", headers=headers)
        with _semaphore(self.url, self.max_concurrent):
            with _LOCK:
                IN_FLIGHT[self.url] = IN_FLIGHT.get(self.url, 0) + 1
                PEAK[self.url] = max(PEAK.get(self.url, 0), IN_FLIGHT[self.url])
            try:
                with urllib.request.urlopen(req, timeout=timeout) as resp:
                    raw = resp.read()
            except urllib.error.HTTPError as exc:
                if exc.code >= 500 or exc.code == 429:
                    raise _Retryable(f"HTTP {exc.code}") from None
                raise UsageError(f"sandbox server {self.url} rejected the request: HTTP {exc.code} "
                                 f"{exc.read()[:200]!r}\ncheck reward.sandbox.url and language") from None
            except (urllib.error.URLError, OSError, TimeoutError) as exc:
                raise _Retryable(f"{type(exc).__name__}: {exc}") from None
            finally:
                with _LOCK:
                    IN_FLIGHT[self.url] -= 1
        try:
            reply = json.loads(raw)
        except json.JSONDecodeError:
            raise _Retryable(f"reply is not JSON: {raw[:120]!r}") from None
        if not isinstance(reply, dict):
            raise _Retryable(f"reply is not a JSON object: {raw[:120]!r}")
        return reply


class _Retryable(Exception):
    pass


def _to_result(reply: dict[str, Any], wall_s: float) -> RunResult:
    compiled = reply.get("compile_result") or {}
    run = reply.get("run_result") or {}
    failed_compile = (compiled.get("status") not in (None, "Finished")
                      or compiled.get("return_code") not in (None, 0))
    if compiled and failed_compile:
        return RunResult(status="error", returncode=compiled.get("return_code"),
                         stdout=str(compiled.get("stdout") or ""), stderr=str(compiled.get("stderr") or ""),
                         wall_s=wall_s, extra={"mode": "remote", "phase": "compile"})
    rstat = run.get("status")
    rc = run.get("return_code")
    if rstat == "TimeLimitExceeded":
        status = "timeout"
    elif rstat == "Finished" and rc == 0:
        status = "ok"
    elif rstat in ("Finished", "Error"):
        status = "error"
    else:
        status = "sandbox_error"
    stderr = str(run.get("stderr") or "")
    if status == "error" and "MemoryError" in stderr[-2000:]:
        status = "memory"
    if status == "sandbox_error":
        stderr = f"rhc-remote: unexpected reply {json.dumps(reply)[:300]}"
    return RunResult(status=status, returncode=rc, stdout=str(run.get("stdout") or ""), stderr=stderr,
                     wall_s=wall_s, extra={"mode": "remote"})
