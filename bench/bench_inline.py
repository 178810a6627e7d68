"""Per-sample overhead of each executor on a trivial reward.

1. The inline executor vs calling the reward in a loop (goal <= 1.2x). The runner's time covers
   everything :meth:`Runner.score` does: checking the samples, calling the reward, checking every
   value, the aggregate score and the metrics (mean, std, latency percentiles). Best of several
   alternating runs, so that load from elsewhere hits both alike.
2. 100k trivial rows through ``rewardhub score`` (the whole command: start-up, reading, scoring,
   writing) per executor: inline, thread, async (an ``async def`` reward) and process, as a ratio
   of the inline run (issue 20's goal: thread and async within 2x of inline). Median of
   alternating runs.

    python bench/bench_inline.py [--cli-only | --runner-only] [N]
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

from rewardhub.execution import Runner


def trivial(*, response, **kwargs):
    return float(len(response) > 3)


def main(n: int = 100_000, repeat: int = 7) -> None:
    batch = [
        {"prompt": "p", "response": "x" * (i % 7), "ground_truth": None, "data_source": "d", "extra_info": {}}
        for i in range(n)
    ]
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
    print(
        f"inline executor, trivial reward, {n} samples, best of {repeat}: loop {b * 1e6 / n:.3f} us/sample, "
        f"runner {o * 1e6 / n:.3f} us/sample -> ratio {o / b:.2f}x (goal <= 1.2x); "
        f"load average {os.getloadavg()[0]:.1f}"
    )


REWARDS = """
def trivial(*, response, **kwargs):
    return float(len(response) > 3)


async def atrivial(*, response, **kwargs):
    return float(len(response) > 3)
"""
EXECUTORS = {
    "inline": ("trivial", "inline"),
    "thread": ("trivial", "thread"),
    "async": ("atrivial", "inline"),
    "process": ("trivial", "process"),
}


def cli(n: int = 100_000, repeat: int = int(os.environ.get("BENCH_REPEAT", "3"))) -> None:
    if not os.environ.get("BENCH_NO_BYTECODE"):
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from _util import ensure_bytecode

        print(ensure_bytecode())
    with tempfile.TemporaryDirectory() as d:
        data = os.path.join(d, "rows.jsonl")
        with open(data, "w") as f:
            for i in range(n):
                f.write(json.dumps({"prompt": "p", "response": "x" * (i % 7), "ground_truth": None,
                                    "data_source": "d", "extra_info": {}}) + "\n")
        module = os.path.join(d, "trivial_rewards.py")
        with open(module, "w") as f:
            f.write(REWARDS)
        cmds = {}
        for name, (fn, executor) in EXECUTORS.items():
            cfg = os.path.join(d, f"{name}.yaml")
            with open(cfg, "w") as f:
                f.write(f"reward:\n  rewards:\n    - path: {module}\n      function: {fn}\n"
                        f"      executor: {executor}\n")
            cmds[name] = [
                sys.executable,
                "-m",
                "rewardhub",
                "score",
                cfg,
                data,
                "-o",
                os.path.join(d, f"{name}.out"),
                "--no-progress",
            ]
        times: dict[str, list[float]] = {name: [] for name in cmds}
        cpus: dict[str, list[float]] = {name: [] for name in cmds}
        for _ in range(repeat):  # alternate, so that load from elsewhere hits all alike
            for name, cmd in cmds.items():
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                t = time.perf_counter()
                subprocess.run(cmd, check=True, capture_output=True)
                times[name].append(time.perf_counter() - t)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpus[name].append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        want = [float(i % 7 > 3) for i in range(n)]
        for name in cmds:
            with open(os.path.join(d, f"{name}.out")) as f:
                got = [json.loads(line)["score"] for line in f]
            assert got == want, f"{name}: wrong scores"
    base, base_cpu = statistics.median(times["inline"]), statistics.median(cpus["inline"])
    print(f"rewardhub score, {n} trivial rows, median of {repeat} (whole command), ratio to inline "
          f"(goal: thread and async <= 2x):")
    for name, ts in times.items():
        med = statistics.median(ts)
        cpu = statistics.median(cpus[name])
        print(f"  {name:8s} {med:6.2f}s  ({min(ts):.2f}..{max(ts):.2f})  -> {med / base:.2f}x;  "
              f"CPU {cpu:.2f}s -> {cpu / base_cpu:.2f}x")
    print(f"  load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    sys.modules.setdefault("bench_inline", sys.modules["__main__"])
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    rows = int(args[0]) if args else 100_000
    if "--cli-only" not in sys.argv:
        main(rows)
    if "--runner-only" not in sys.argv:
        cli(rows)
