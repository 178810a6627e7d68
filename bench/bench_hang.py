"""1% of samples hang: process-executor throughput stays within 2x of the clean run, nothing lost."""

from __future__ import annotations

import os
import sys
import tempfile
import time

from rewardhub.execution import Runner

REWARD = '''
import time
from rewardhub_math.reward import math_verify
def maybe_hang(*, response, ground_truth, extra_info=None, **kw):
    if (extra_info or {}).get("hang"):
        while True:
            time.sleep(1)
    return math_verify(response=response, ground_truth=ground_truth)
'''


def main(n: int = 1000, timeout_s: float = 1.0) -> None:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
    from make_samples import samples

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "hang_reward.py")
        with open(path, "w") as f:
            f.write(REWARD)
        cfg = {"rewards": [{"path": path, "function": "maybe_hang", "executor": "process", "timeout_s": timeout_s,
                            "max_concurrency": 2}]}
        clean = samples(n, seed=2)
        hung = [dict(s, extra_info=dict(s["extra_info"], hang=(i % 100 == 7))) for i, s in enumerate(clean)]
        with Runner.from_config(cfg) as r:
            r.score(clean[:20])
            t = time.perf_counter()
            a = r.score(clean)
            t_clean = time.perf_counter() - t
            t = time.perf_counter()
            b = r.score(hung)
            t_hung = time.perf_counter() - t
        lost = sum(s is None for s in b.scores)
        timeouts = b.metrics["rewards/maybe_hang/timeouts"]
        same = sum(x == y for x, y, h in zip(a.scores, b.scores, hung) if not h["extra_info"]["hang"])
        print(f"{n} samples, 1% hang (timeout {timeout_s}s): clean {n / t_clean:.0f}/s, with hangs "
              f"{n / t_hung:.0f}/s -> slowdown {t_hung / t_clean:.2f}x (goal <= 2x); timeouts {timeouts:.0f}, "
              f"rows {len(b.scores)}/{n}, lost {lost}, unchanged scores {same}/{n - int(timeouts)}")


if __name__ == "__main__":
    main()
