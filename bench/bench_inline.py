"""Per-sample overhead of the inline executor on a trivial reward vs calling it in a loop (goal <= 1.2x)."""

from __future__ import annotations

import time

from rewardhub.execution import Runner


def trivial(*, response, **kwargs):
    return float(len(response) > 3)


def main(n: int = 100_000) -> None:
    batch = [{"prompt": "p", "response": "x" * (i % 7), "ground_truth": None, "data_source": "d", "extra_info": {}}
             for i in range(n)]
    t = time.perf_counter()
    direct = [trivial(prompt=s["prompt"], response=s["response"], ground_truth=s["ground_truth"],
                      data_source=s["data_source"], extra_info=s["extra_info"]) for s in batch]
    base = time.perf_counter() - t
    with Runner.from_config({"rewards": [{"module": __name__, "function": "trivial"}]}) as r:
        r.score(batch[:100])
        t = time.perf_counter()
        res = r.score(batch)
        ours = time.perf_counter() - t
    assert res.scores == direct
    print(f"inline executor, trivial reward, {n} samples: loop {base * 1e6 / n:.2f} us/sample, "
          f"runner {ours * 1e6 / n:.2f} us/sample -> ratio {ours / base:.2f}x (goal <= 1.2x)")


if __name__ == "__main__":
    import sys

    sys.modules.setdefault("bench_inline", sys.modules["__main__"])
    main()
