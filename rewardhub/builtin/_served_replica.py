"""One replica of a served model: a Ray Serve deployment that runs vLLM's OpenAI-compatible server as a
child process and passes each HTTP request through to it.

Ray Serve does the rest: it routes each request to the less loaded of two replicas (their queue lengths),
health-checks each replica (:meth:`VLLMReplica.check_health`) and starts a new one in place of one that
dies. A replica whose vLLM server exits ends itself at once (``os._exit``), so Serve stops routing to it
and replaces it; the requests it held fail with a 5xx, which ``llm_judge`` tries again (on another
replica). The vLLM server runs under :mod:`._served_child`, which stops it when the replica goes.

This module imports Ray, Starlette and aiohttp only inside the replica's methods.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["VLLMReplica", "free_port"]

#: vLLM's environment on a CPU replica (the config's ``env`` wins): one OpenMP thread, not bound to cores
#: (more made generation ~100x slower on a shared 2-core host), a 1 GiB KV cache
CPU_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1"}


def free_port() -> int:
    """A port no process listens on now, on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class VLLMReplica:
    """A vLLM server on ``model`` answering as ``served_name``; started in ``__init__`` (ready when
    ``/v1/models`` answers), its output in ``log_dir``/replica-PID.log."""

    def __init__(self, model: str, served_name: str, args: Sequence[str], env: Mapping[str, str],
                 log_dir: str, start_timeout_s: float, gpu: bool) -> None:
        self.port = free_port()
        self._closing = False
        Path(log_dir).mkdir(parents=True, exist_ok=True)
        self.log = Path(log_dir) / f"replica-{os.getpid()}.log"
        cmd = [sys.executable, "-m", "rewardhub.builtin._served_child", str(os.getpid()), "--",
               sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model,
               "--served-model-name", served_name, "--host", "127.0.0.1", "--port", str(self.port), *args]
        full_env = {**os.environ, **({} if gpu else CPU_ENV), **env}
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=full_env,
                                         start_new_session=True)
        self._url = f"http://127.0.0.1:{self.port}"
        end = time.monotonic() + start_timeout_s
        while True:  # ready: /v1/models answers (or the server died, or the bound passed)
            try:
                with urllib.request.urlopen(self._url + "/v1/models", timeout=2):
                    break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > end:
                    self._stop()
                    tail = self.log.read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"the vLLM server of {model!r} did not start (exit "
                                       f"{self.proc.poll()}, {start_timeout_s:g} s bound); its log "
                                       f"{self.log} ends:\n{tail}")
                time.sleep(1)
        threading.Thread(target=self._watch, name="vllm-watch", daemon=True).start()

    def _watch(self) -> None:
        self.proc.wait()
        if not self._closing:  # the server died under the replica: end the replica, Serve replaces it
            os._exit(1)

    def _stop(self) -> None:
        self._closing = True
        if self.proc.poll() is None:
            self.proc.terminate()  # _served_child stops the whole group
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)

    def pids(self) -> dict[str, Any]:
        """This replica's process id, its vLLM keeper's and its log (what a test kills and reads)."""
        return {"replica": os.getpid(), "server": self.proc.pid, "log": str(self.log)}

    def check_health(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"the vLLM server exited ({self.proc.returncode})")

    async def __call__(self, request: Any) -> Any:
        import aiohttp
        from starlette.responses import Response

        path = request.scope.get("path", "")
        root = request.scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root):]
        body = await request.body()
        headers = {"Content-Type": request.headers.get("content-type", "application/json")}
        try:
            async with aiohttp.ClientSession() as session, session.request(
                    request.method, self._url + path, data=body, headers=headers) as resp:
                content = await resp.read()
                return Response(content, status_code=resp.status,
                                media_type=resp.headers.get("Content-Type", "application/json"))
        except aiohttp.ClientError as exc:  # the server went away mid-request: a 503 the judge tries again
            return Response(f'{{"error": "replica lost its vLLM server: {type(exc).__name__}"}}',
                            status_code=503, media_type="application/json")

    def __del__(self) -> None:
        try:
            self._stop()
        except Exception:
            pass
