"""The memory of a busy `rewardhub serve` under many large requests: 40 concurrent requests of ~7.7 MB
(4,000 rows of ~1.9 kB each) to a server whose one call slot is held by a reward that waits.

Prints the server's RSS before the requests, its peak (VmHWM) while they wait and after they are
answered, and how many were answered 503 first (the remote client retries those; here each is sent
again after its Retry-After until it is answered). With the waiting bodies bounded
(``--max-waiting-mb``, default 128) the peak stays near the limit's worth of parsed rows; before, every
body was read and held at once.

    .venv/bin/python bench/bench_serve_memory.py [--clients 40] [--extra-args "--max-waiting-mb 128"]

Run it against another tree with PYTHONPATH pointing there, from a folder outside this one (``python -m``
puts the working folder first on the path).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shlex
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from serve_process import Server  # noqa: E402
from serve_process import wait_for  # noqa: E402

WAITER = """\
import os
import time


def waiter(*, response, **kwargs):
    while response == "wait" and not os.path.exists({release!r}):
        time.sleep(0.05)
    return float(len(response))
"""


def _kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def _post(url: str, body: bytes) -> tuple[int, int]:
    """Send until answered (a 503 is sent again after its Retry-After): (status, 503s met)."""
    busy = 0
    while True:
        req = urllib.request.Request(url + "/score", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=600) as resp:
                resp.read()
                return resp.status, busy
        except urllib.error.HTTPError as exc:
            exc.read()
            if exc.code != 503:
                return exc.code, busy
            busy += 1
            time.sleep(float(exc.headers.get("Retry-After") or 1))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=40)
    ap.add_argument("--rows", type=int, default=4000)
    ap.add_argument("--extra-args", default="")
    args = ap.parse_args()
    body = json.dumps({"rows": [{"response": "x" * 1900, "extra_info": {"i": i}} for i in range(args.rows)]}
                      ).encode()
    with tempfile.TemporaryDirectory() as tmp:
        release = Path(tmp) / "release"
        (Path(tmp) / "waiter.py").write_text(WAITER.format(release=str(release)))
        cfg = Path(tmp) / "waiter.yaml"
        path = Path(tmp) / "waiter.py"
        cfg.write_text(f"reward:\n  rewards:\n    - path: {path}\n      function: waiter\n")
        with Server(cfg, "--max-calls", "1", *shlex.split(args.extra_args)) as server:
            pid = server.proc.pid
            with concurrent.futures.ThreadPoolExecutor(args.clients + 1) as pool:
                hold = pool.submit(server.post, "/score", {"rows": [{"response": "wait"}]})
                wait_for(lambda: server.metric("rewardhub_inflight_batches") == 1, "the held call")
                rss0 = _kib(pid, "VmRSS")
                futs = [pool.submit(_post, server.url, body) for _ in range(args.clients)]
                # the requests are in: each waits in the server (held) or was answered 503 at least once
                time.sleep(30)
                inflight = server.metric("rewardhub_inflight_requests") - 1
                peak_waiting = _kib(pid, "VmHWM")
                release.touch()
                results = [f.result() for f in futs]
                hold.result()
            peak = _kib(pid, "VmHWM")
            rss1 = _kib(pid, "VmRSS")
        statuses = sorted({s for s, _ in results})
        busy = sum(b for _, b in results)
        where = os.environ.get("PYTHONPATH", "")[:60]
        flags = args.extra_args or "default flags"
        print(f"{args.clients} requests of {len(body) / 1e6:.1f} MB ({where}; {flags})")
        print(f"server RSS: {rss0 / 1024:.0f} MiB before; peak {peak_waiting / 1024:.0f} MiB while they "
              f"waited, {peak / 1024:.0f} MiB overall; {rss1 / 1024:.0f} MiB after")
        print(f"{inflight:.0f} requests held in the server 30 s in; answers: {statuses}; 503s met on the way "
              f"(sent again): {busy}")


if __name__ == "__main__":
    main()
