"""Latency percentiles are taken over each call's own time, on every executor (not over the mean
of a block of calls), and ``score --summary-json`` names the slowest samples."""

from __future__ import annotations

import json

import pytest

from rewardhub.execution import Runner

REWARDS = '''
import time
def mostly_fast(*, response, **kwargs):
    """Three slow calls (~0.2 s each) among fast ones."""
    if response.startswith("slow"):
        time.sleep(0.2)
    return 1.0
'''


def _rows(n=200, slow=(20, 100, 180)):
    return [{"prompt": "p", "response": f"slow{i} " + "x" * 100 if i in slow else f"fast{i}",
             "data_source": f"ds{i % 3}"} for i in range(n)]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("executor", ["inline", "thread", "process"])
def test_p99_is_the_slow_calls_time_on_every_executor(tmp_path, executor):
    """Three 0.2 s calls in 200: p99 falls among them (the 198th of 200 ordered latencies and
    up), so it is at least the slow calls' 0.2 s sleep; p50 is a fast call's time."""
    path = tmp_path / "latency_rewards.py"
    path.write_text(REWARDS)
    term = {"path": str(path), "function": "mostly_fast", "executor": executor, "max_concurrency": 1}
    with Runner.from_config({"rewards": [term]}, process_workers=1) as r:
        res = r.score(_rows())
    m = res.metrics
    assert m["rewards/mostly_fast/latency_p99"] >= 0.2, m
    assert m["rewards/mostly_fast/latency_p50"] < 0.1, m
    lat = res.columns["mostly_fast"].latency
    assert sorted(sorted(range(200), key=lat.__getitem__)[-3:]) == [20, 100, 180]  # per sample too


@pytest.mark.timeout(120)
def test_summary_json_lists_the_slowest_samples(cli, tmp_path):
    path = tmp_path / "latency_rewards.py"
    path.write_text(REWARDS)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"reward:\n  rewards:\n    - path: {path}\n      function: mostly_fast\n")
    data = tmp_path / "in.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in _rows()))
    summary = tmp_path / "summary.json"
    res = cli("score", str(cfg), str(data), "-o", str(tmp_path / "out.jsonl"), "--summary-json", str(summary))
    assert res.returncode == 0, res.stderr
    doc = json.loads(summary.read_text())
    assert doc["metrics"]["rewards/mostly_fast/latency_p99"] >= 0.2
    slowest = doc["slowest"]["mostly_fast"]
    assert [s["index"] for s in slowest[:3]] and sorted(s["index"] for s in slowest[:3]) == [20, 100, 180]
    first = slowest[0]
    assert first["seconds"] >= 0.2 and first["data_source"] == f"ds{first['index'] % 3}"
    assert first["response"] == (f"slow{first['index']} " + "x" * 100)[:80]
    assert all(a["seconds"] >= b["seconds"] for a, b in zip(slowest, slowest[1:]))
