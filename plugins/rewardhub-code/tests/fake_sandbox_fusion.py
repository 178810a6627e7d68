"""A small HTTP server that speaks SandboxFusion's ``/run_code`` API and runs code in the local sandbox.

Request and reply shapes follow SandboxFusion's ``RunCodeRequest`` / ``RunCodeResponse``:
``{"code", "language", "stdin", "run_timeout", "memory_limit_MB", ...}`` in,
``{"status", "message", "compile_result", "run_result": {"status", "return_code", "stdout",
"stderr", "execution_time"}}`` out. Knobs let tests make it slow, fail, or report SandboxError.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler
from http.server import ThreadingHTTPServer

from rewardhub_code import sandbox

_RUN_STATUS = {"ok": "Finished", "error": "Finished", "memory": "Finished", "output_limit": "Finished",
               "timeout": "TimeLimitExceeded"}


class FakeSandboxFusion:
    """Start with ``with FakeSandboxFusion() as srv:``; ``srv.url`` is the base URL."""

    def __init__(self, *, delay_s: float = 0.0, http_errors: int = 0, sandbox_errors: int = 0) -> None:
        self.delay_s = delay_s
        self.http_errors = http_errors
        self.sandbox_errors = sandbox_errors
        self.requests: list[dict] = []
        self.paths: list[str] = []
        self.in_flight = 0
        self.peak = 0
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output quiet
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with outer._lock:
                    outer.requests.append(body)
                    outer.paths.append(self.path)
                    outer.in_flight += 1
                    outer.peak = max(outer.peak, outer.in_flight)
                    fail_http = outer.http_errors > 0
                    outer.http_errors -= fail_http
                    fail_sb = not fail_http and outer.sandbox_errors > 0
                    outer.sandbox_errors -= fail_sb
                # a request is in flight until its answer is ready, not until that is sent: once the
                # client has the answer it may send its next request, which can arrive before this
                # thread would run again after the send
                try:
                    time.sleep(outer.delay_s)
                    if self.path != "/run_code":
                        code, answer = 404, {"detail": "Not Found"}
                    elif fail_http:
                        code, answer = 503, {"detail": "overloaded"}
                    elif fail_sb:
                        code, answer = 200, {"status": "SandboxError", "message": "pod evicted",
                                             "compile_result": None, "run_result": None}
                    else:
                        code, answer = 200, outer._run(body)
                finally:
                    with outer._lock:
                        outer.in_flight -= 1
                self._send(code, answer)

            def _send(self, code, obj):
                raw = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def _run(self, body: dict) -> dict:
        if body.get("language") != "python":
            return {"status": "SandboxError", "message": f"unsupported language {body.get('language')}",
                    "compile_result": None, "run_result": None}
        mem = int(body.get("memory_limit_MB") or -1)
        cfg = sandbox.SandboxLimits(timeout_s=float(body.get("run_timeout") or 10),
                                    memory_mb=mem if mem > 0 else 1024)
        res = sandbox.run_python(
            {"main.py": body["code"]}, "main.py", stdin=body.get("stdin") or "", config=cfg
        )
        if res.status == "sandbox_error":
            return {
                "status": "SandboxError",
                "message": res.stderr,
                "compile_result": None,
                "run_result": None,
            }
        rc = res.returncode if res.status != "timeout" else None
        return {
            "status": "Success" if res.status == "ok" else "Failed",
            "message": "",
            "compile_result": None,
            "run_result": {
                "status": _RUN_STATUS[res.status],
                "execution_time": res.wall_s,
                "return_code": rc,
                "stdout": res.stdout,
                "stderr": res.stderr,
            },
            "executor_pod_name": None,
            "files": {},
        }

    def __enter__(self) -> FakeSandboxFusion:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
