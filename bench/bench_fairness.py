"""Callers sharing one process pool: a small call beside a big one, and after an abandoned one.

1. Fairness: a 300-row call starts, and once its first rows are scored a 2-row call starts beside
   it. Printed: the small call's time against the same call on an idle pool (the ratio), and whether
   it finished before the big call's last row (first come, first served: it waits for all 300).
2. Cancelled callers: a 200-row ``score_async`` is cancelled a moment after it starts (its client
   went away); then a 2-row call is scored. Printed: the small call's time against an idle pool's
   (its rows used to wait behind the 200 nobody waited for).

Each reward call computes for about 10 ms; the pool has 2 workers.

    python bench/bench_fairness.py
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import threading
import time

from rewardhub.execution import Runner

REWARD = '''
import time
def busy(*, response, **kwargs):
    end = time.perf_counter() + 0.01
    while time.perf_counter() < end:
        pass
    return float(len(response))
'''


def rows(n: int, tag: str) -> list[dict[str, str]]:
    return [{"prompt": "p", "response": f"{tag}{i}"} for i in range(n)]


def timed(runner: Runner, n: int, tag: str) -> float:
    t = time.perf_counter()
    runner.score(rows(n, tag))
    return time.perf_counter() - t


def fairness(runner: Runner, idle: float) -> None:
    first = threading.Event()
    big_done: list[float] = []

    def big() -> None:
        runner.score(rows(300, "big"), progress=lambda done, total: first.set())
        big_done.append(time.perf_counter())

    t = threading.Thread(target=big)
    t.start()
    first.wait()
    start = time.perf_counter()
    runner.score(rows(2, "small"))
    small_done = time.perf_counter()
    t.join()
    small = small_done - start
    print(f"fairness: 2-row call beside a 300-row call took {small:.3f} s, idle pool {idle:.3f} s -> "
          f"ratio {small / idle:.1f}x; finished before the big call's last row: {small_done < big_done[0]}")


async def cancelled(runner: Runner, idle: float) -> None:
    task = asyncio.ensure_future(runner.score_async(rows(200, "gone")))
    await asyncio.sleep(0.1)
    task.cancel()
    start = time.perf_counter()
    await runner.score_async(rows(2, "small"))
    small = time.perf_counter() - start
    print(f"cancelled caller: 2-row call after a cancelled 200-row call took {small:.3f} s, "
          f"idle pool {idle:.3f} s -> ratio {small / idle:.1f}x")
    try:
        await task
    except asyncio.CancelledError:
        pass


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "busy_reward.py")
        with open(path, "w") as f:
            f.write(REWARD)
        cfg = {"rewards": [{"path": path, "function": "busy", "executor": "process"}]}
        with Runner.from_config(cfg, process_workers=2) as runner:
            timed(runner, 20, "warm")
            idle = min(timed(runner, 2, "idle") for _ in range(5))
            fairness(runner, idle)
            time.sleep(0.5)
            asyncio.run(cancelled(runner, idle))
            time.sleep(3)  # what the cancelled call left behind, if anything, is done


if __name__ == "__main__":
    main()
