"""Does ``execution._local.run_threads`` (its own pool) buy anything over the standard library's
``concurrent.futures.ThreadPoolExecutor``? (issue 38 §3)

The standard-library side is its cheapest form: one future a call, no timeout and no retry (what a
replacement would have to add on top only costs more). Same calls, same thread count (8), alternating
runs, best of several: trivial calls (where a pool's per-call cost shows) and 1 ms sleeping calls
(a reward waiting on I/O). Prints the ratio stdlib / run_threads per case. Last, how long a process
takes to exit with a 3 s call still running on each kind of thread: the pool's threads are joined at
interpreter exit (a hung reward would keep ``rewardhub score`` from exiting), run_threads' are daemons.

    python bench/bench_threads.py [N]
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from rewardhub.execution._local import _call_once
from rewardhub.execution._local import run_threads


def stdlib_threads(calls, limit: int) -> list:
    pool = ThreadPoolExecutor(limit, thread_name_prefix="rewardhub-reward")
    futures = [pool.submit(_call_once, call, True) for call in calls]
    out = [f.result() for f in futures]
    pool.shutdown()
    return out


def case(name: str, calls, repeat: int) -> None:
    ours, std = [], []
    for _ in range(repeat):
        t = time.perf_counter()
        a, _ = run_threads(calls, None, 8, 0)
        ours.append(time.perf_counter() - t)
        t = time.perf_counter()
        b = stdlib_threads(calls, 8)
        std.append(time.perf_counter() - t)
    assert [r[1] for r in a] == [r[1] for r in b]
    o, s = min(ours), min(std)
    print(f"{name}, {len(calls)} calls, 8 threads, best of {repeat}: run_threads {o * 1e6 / len(calls):.1f} "
          f"us/call, ThreadPoolExecutor {s * 1e6 / len(calls):.1f} us/call -> ratio {s / o:.2f}x "
          f"(stdlib / ours); load average {os.getloadavg()[0]:.1f}")


def exit_after_hang() -> None:
    pool = ("from concurrent.futures import ThreadPoolExecutor\nimport time\n"
            "ThreadPoolExecutor(2).submit(time.sleep, 3)")
    ours = ("import time\nfrom rewardhub.execution._local import run_threads\n"
            "run_threads([lambda: time.sleep(3)], 0.1, 2, 0)")
    for name, code in (("ThreadPoolExecutor", pool), ("run_threads", ours)):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        print(f"{name}: the process exits {time.perf_counter() - t:.1f} s after start, a 3 s call running")


def main(n: int = 100_000) -> None:
    case("trivial calls", [lambda i=i: i * 2 for i in range(n)], 5)
    case("1 ms sleeping calls", [lambda i=i: time.sleep(0.001) or i for i in range(max(n // 50, 8))], 3)
    exit_after_hang()


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
