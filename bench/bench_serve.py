"""Rows/s through `rewardhub serve` vs `rewardhub score` on the same 3,000 math samples (goal: >= 0.8x at
batches of 64).

Both score with examples/score.yaml (math_verify on the process executor, plus a regex term).
``rewardhub score``: its own figure, the "N samples scored in X s" it prints (the Runner's pool
start included, the interpreter's start-up not). The server: started and warmed with one request
first (a server runs for hours: its start-up is no part of its rate), then every row sent in
requests of 64 rows, by 1 client and by 8 concurrent clients (stdlib HTTP, JSON both ways). Also
checks that the server's scores equal the file's. Prints the ratios.

    .venv/bin/python bench/bench_serve.py [-n 3000]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import tempfile
import time

from _util import REPO
from _util import ensure_bytecode
from make_samples import samples

sys.path.insert(0, os.path.join(REPO, "tests"))
from serve_process import Server  # noqa: E402

CONFIG = os.path.join(REPO, "examples", "score.yaml")
BATCH = 64


def score_cli(data: str, out: str) -> float:
    res = subprocess.run(
        [sys.executable, "-m", "rewardhub", "score", CONFIG, data, "-o", out, "--no-progress"],
        capture_output=True,
        text=True,
        check=True,
    )
    m = re.search(r"(\d+) samples scored in ([0-9.]+)s", res.stdout + res.stderr)
    assert m, res.stdout + res.stderr
    return int(m.group(1)) / float(m.group(2))


def through_server(server: Server, rows: list[dict], clients: int) -> tuple[float, list[float]]:
    batches = [rows[k:k + BATCH] for k in range(0, len(rows), BATCH)]
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        answers = list(pool.map(lambda b: server.post("/score", {"rows": b}), batches))
    wall = time.perf_counter() - t0
    scores = []
    for status, body in answers:
        assert status == 200, body
        scores.extend(r["score"] for r in body["rows"])
    return len(rows) / wall, scores


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=3000)
    args = ap.parse_args()
    note = ensure_bytecode()
    rows = samples(args.n)
    with tempfile.TemporaryDirectory() as tmp:
        data, out = os.path.join(tmp, "d.jsonl"), os.path.join(tmp, "o.jsonl")
        with open(data, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
        cli_rates = sorted(score_cli(data, out) for _ in range(2))
        with open(out) as f:
            expected = [json.loads(line)["score"] for line in f]
        with Server(CONFIG) as server:
            server.post("/score", {"rows": rows[:BATCH]})  # warm: the process pool starts
            one, scores1 = through_server(server, rows, 1)
            eight, scores8 = through_server(server, rows, 8)
            batches = server.metric("rewardhub_batches_total")
        assert scores1 == expected and scores8 == expected, (
            "the server's scores differ from rewardhub score's"
        )
    best_cli = cli_rates[-1]
    print(f"{args.n} math samples, examples/score.yaml, {os.cpu_count()} cores ({note})")
    print(f"rewardhub score:                {best_cli:8,.0f} rows/s (best of 2, as it reports itself)")
    print(f"serve, 1 client,  batches of {BATCH}: {one:8,.0f} rows/s  ratio {one / best_cli:.2f}x")
    print(f"serve, 8 clients, batches of {BATCH}: {eight:8,.0f} rows/s  ratio {eight / best_cli:.2f}x "
          f"({int(batches)} Runner calls in all)")
    print(f"goal >= 0.8x: {'met' if max(one, eight) / best_cli >= 0.8 else 'NOT met'}")


if __name__ == "__main__":
    main()
