"""The reward cache on GRPO groups: each group is 8 completions of one prompt with 3 distinct replies.

Two expensive rewards, each scored with ``cache: true`` and without: a stand-in for a served judge
(a reward that waits 50 ms per call, as a request would, one call at a time) and rewardhub-code's
real ``code_tests`` sandbox (process executor). Each run is a fresh Runner (an empty cache), so the
saving is the in-batch one only. Calls are counted by the reward itself (a line per call in a file).
A last line re-runs ``rewardhub score --cache DIR`` on the same rows: the second run makes no call.

    python bench/bench_cache.py [GROUPS]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from rewardhub.execution import Runner

JUDGE = '''
import time

def judge_like(*, response, ground_truth, log):
    with open(log, "a") as f:
        f.write(response + "\\n")
    time.sleep(0.05)
    return float(response.strip() == ground_truth)
'''

#: 3 distinct replies, in a group of 8
REPLIES = ["4", "the answer is 4", "5"]
PATTERN = [0, 1, 0, 2, 1, 0, 0, 2]
PROGRAMS = ["def add(a, b):\n    return a + b", "def add(a, b):\n    return a - b",
            "def add(a, b):\n    return b + a"]


def groups(n: int, replies: list[str], truth: object) -> list[dict[str, object]]:
    return [{"prompt": f"q{g}", "response": f"{replies[k]} #{g}" if isinstance(truth, str) else replies[k],
             "ground_truth": truth, "extra_info": {"uid": g}} for g in range(n) for k in PATTERN]


def timed(cfg: dict[str, object], rows: list[dict[str, object]], log: str | None, repeat: int = 3
          ) -> tuple[float, int, list[float | None]]:
    times, calls, scores = [], 0, []
    for _ in range(repeat):
        if log and os.path.exists(log):
            os.remove(log)
        with Runner.from_config(cfg, process_workers=2) as runner:
            t = time.perf_counter()
            res = runner.score(rows)
            times.append(time.perf_counter() - t)
        scores = res.scores
        # without a log (code_tests): the calls are the cache's misses, or one a sample with no cache
        misses = [v for k, v in res.metrics.items() if k.endswith("/cache_misses")]
        calls = sum(1 for _ in open(log)) if log else int(misses[0]) if misses else len(rows)
    return statistics.median(times), calls, scores


def compare(name: str, term: dict[str, object], rows: list[dict[str, object]], log: str | None) -> None:
    off = timed({"rewards": [{**term, "cache": False}]}, rows, log)
    on = timed({"rewards": [{**term, "cache": True}]}, rows, log)
    assert on[2] == off[2], "the cache changed a score"
    print(f"{name}: {len(rows)} samples ({len(rows) // 8} groups of 8, 3 distinct replies each)\n"
          f"  no cache: {off[1]} calls, {off[0]:.3f}s\n  cache:    {on[1]} calls, {on[0]:.3f}s\n"
          f"  ratio cache/no cache: calls {on[1] / off[1]:.3f}, time {on[0] / off[0]:.3f}")


def rerun(d: str, rows: list[dict[str, object]], term: dict[str, object], log: str) -> None:
    data, cfg = os.path.join(d, "rows.jsonl"), os.path.join(d, "cfg.yaml")
    with open(data, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    with open(cfg, "w") as f:
        json.dump({"reward": {"rewards": [{**term, "cache": True}]}}, f)
    os.remove(log)
    for run in (1, 2):
        t = time.perf_counter()
        out = os.path.join(d, f"o{run}")
        subprocess.run([sys.executable, "-m", "rewardhub", "score", cfg, data, "-o", out, "--cache",
                        os.path.join(d, "cache")], check=True, capture_output=True)
        calls = sum(1 for _ in open(log)) if os.path.exists(log) else 0
        took = time.perf_counter() - t
        print(f"  score --cache run {run}: {calls} calls so far, {took:.2f}s (the whole command)")
        with open(os.path.join(d, "o1")) as a, open(os.path.join(d, f"o{run}")) as b:
            assert a.read() == b.read(), "a re-run from the cache wrote other rows"


def main(n: int = 4) -> None:
    with tempfile.TemporaryDirectory() as d:
        path, log = os.path.join(d, "judge_like.py"), os.path.join(d, "calls.txt")
        with open(path, "w") as f:
            f.write(JUDGE)
        # one call at a time: a served judge's cost is its calls (its rate or its GPU), not our threads
        term = {"path": path, "function": "judge_like", "executor": "thread", "max_concurrency": 1,
                "kwargs": {"log": log}}
        rows = groups(n, REPLIES, "4")
        compare("judge-like reward (50 ms a call, thread executor)", term, rows, log)
        rerun(d, rows, term, log)
        code = groups(n, [f"```python\n{p}\n```" for p in PROGRAMS], ["assert add(2, 3) == 5"])
        compare("code_tests (real sandbox, process executor, 2 workers)",
                {"name": "code_tests", "executor": "process", "max_concurrency": 2}, code, None)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 4)
