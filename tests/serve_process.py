"""A real ``rewardhub serve`` process for the tests: started on a free port, read from its first line."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parent


def _limit_files(n: int) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))


def _not_json(token: str) -> Any:
    raise AssertionError(f"the server answered {token}, which is not JSON")


def wait_for(cond: Any, what: str, limit: float = 60.0) -> None:
    """Poll ``cond()`` until it holds (the server's state seen from outside); fail naming ``what``."""
    end = time.monotonic() + limit
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


class Server:
    """``rewardhub serve CONFIG --port 0``; the bound port comes from the line it prints when ready."""

    def __init__(self, config: str | os.PathLike[str], *args: str, env: dict[str, str] | None = None,
                 cwd: str | None = None, ready_timeout: float = 120, open_files: int | None = None) -> None:
        """:param open_files: the server's limit of open files (soft and hard), as a small ``ulimit -n``."""
        full_env = dict(os.environ)
        full_env["PYTHONPATH"] = os.pathsep.join([str(TESTS), full_env.get("PYTHONPATH", "")])
        full_env.update(env or {})
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rewardhub", "serve", str(config), "--port", "0", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=full_env,
            cwd=cwd,
            preexec_fn=None if open_files is None else functools.partial(_limit_files, open_files),
        )
        self.stderr: list[str] = []
        self._stderr_thread = threading.Thread(target=self._read_stderr, daemon=True)
        self._stderr_thread.start()
        line: list[str] = []
        reader = threading.Thread(target=lambda: line.append(self.proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
        reader.start()
        reader.join(ready_timeout)
        if not line or "http://" not in line[0]:
            self.proc.kill()
            raise RuntimeError(f"server did not start: {line!r}\n{''.join(self.stderr)}")
        self.url = "http://" + line[0].split("http://", 1)[1].split()[0]
        # whatever the rewards print later is read too: a full pipe would block the server
        self._stdout_thread = threading.Thread(target=lambda: self.proc.stdout.read(), daemon=True)  # type: ignore[union-attr]
        self._stdout_thread.start()
        self.token: str | None = (env or {}).get("REWARDHUB_SERVE_TOKEN")

    def _read_stderr(self) -> None:
        for line in self.proc.stderr:  # type: ignore[union-attr]
            self.stderr.append(line)

    def request(self, method: str, path: str, body: Any = None, *, raw: bytes | None = None,
                token: str | None = None, timeout: float = 120) -> tuple[int, Any]:
        """``(status, parsed JSON or text)``."""
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        tok = token if token is not None else self.token
        if tok:
            req.add_header("Authorization", f"Bearer {tok}")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                status, text = resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            status, text = exc.code, exc.read().decode()
        try:
            return status, json.loads(text, parse_constant=_not_json)
        except json.JSONDecodeError:
            return status, text

    def post(self, path: str, body: Any, **kw: Any) -> tuple[int, Any]:
        return self.request("POST", path, body, **kw)

    def get(self, path: str, **kw: Any) -> tuple[int, Any]:
        return self.request("GET", path, **kw)

    def metric(self, name: str) -> float:
        """One sample of ``/metrics`` (``name`` with its labels, as printed)."""
        _, text = self.get("/metrics")
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.rsplit(" ", 1)[1])
        raise KeyError(name)

    def stop(self, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()
        finally:
            self._stderr_thread.join(10)
            self._stdout_thread.join(10)
            for f in (self.proc.stdout, self.proc.stderr):
                if f is not None:
                    f.close()

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
