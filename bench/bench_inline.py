"""Per-sample overhead of the inline executor on a trivial reward vs calling it in a loop (goal <= 1.2x).

The runner's time covers everything :meth:`Runner.score` does: checking the samples, calling the
reward, checking every value, the aggregate score and the metrics (mean, std, latency
percentiles). Best of several alternating runs, so that load from elsewhere hits both alike.
"""

from __future__ import annotations

import os
import time

from rewardhub.execution import Runner


def trivial(*, response, **kwargs):
    return float(len(response) > 3)


def main(n: int = 100_000, repeat: int = 7) -> None:
    batch = [{"prompt": "p", "response": "x" * (i % 7), "ground_truth": None, "data_source": "d", "extra_info": {}}
             for i in range(n)]
    base, ours = [], []
    with Runner.from_config({"rewards": [{"module": __name__, "function": "trivial"}]}) as r:
        r.score(batch[:100])
        for _ in range(repeat):
            t = time.perf_counter()
            direct = [trivial(prompt=s["prompt"], response=s["response"], ground_truth=s["ground_truth"],
                              data_source=s["data_source"], extra_info=s["extra_info"]) for s in batch]
            base.append(time.perf_counter() - t)
            t = time.perf_counter()
            res = r.score(batch)
            metrics = res.metrics
            ours.append(time.perf_counter() - t)
    assert res.scores == direct and metrics["rewards/trivial/count"] == n
    b, o = min(base), min(ours)
    print(f"inline executor, trivial reward, {n} samples, best of {repeat}: loop {b * 1e6 / n:.3f} us/sample, "
          f"runner {o * 1e6 / n:.3f} us/sample -> ratio {o / b:.2f}x (goal <= 1.2x); "
          f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    import sys

    sys.modules.setdefault("bench_inline", sys.modules["__main__"])
    main()
