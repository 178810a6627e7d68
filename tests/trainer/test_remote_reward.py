"""`reward.remote`: the trainer scores on a `rewardhub serve` server (a real process) instead of its own
workers."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: serve_process
from serve_process import Server  # noqa: E402

from rewardhub_trainer.cli import train  # noqa: E402

pytestmark = pytest.mark.ray
pytest.importorskip("aiohttp")


def test_tiny_run_scores_on_a_remote_server(ray_session, tiny_config, tmp_path):
    served = tmp_path / "served.yaml"
    served.write_text("reward:\n  rewards:\n    - name: regex_match\n      kwargs: {pattern: '[0-9]'}\n")
    with Server(served) as server:
        # the server's terms are used (the trainer has none: with reward.remote, reward.rewards is empty)
        cfg = tiny_config(trainer={"mode": "sync", "total_steps": 3},
                          reward={"remote": {"url": server.url, "retry_for_s": 60}, "rewards": []})
        out = tmp_path / "run"
        summary = train(cfg, output=str(out))
        scored = server.metric("rewardhub_rows_total")
        samples = server.metric('rewardhub_reward_samples_total{reward="regex_match"}')
    assert summary["steps"] == 3 and summary["accounting_exact"] is True
    assert scored == samples == summary["samples_generated"] > 0
    assert "reward_worker" not in {w["role"] for w in summary["workers"]}
    assert [(r["name"], r["remote"], r["dist"]) for r in summary["rewards"]] == [
        ("regex_match", server.url, "rewardhub")
    ]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert all(r["rewards/regex_match/count"] == 8 for r in rows if "rewards/regex_match/count" in r)
    assert sum("rewards/regex_match/mean" in r for r in rows) == 3


def test_unreachable_server_stops_before_ray(tiny_config, tmp_path):
    from rewardhub.errors import UsageError

    cfg = tiny_config(reward={"remote": "http://127.0.0.1:9", "rewards": []})
    with pytest.raises(UsageError, match="reward.remote: reward server http://127.0.0.1:9 cannot be reached"):
        train(cfg, output=str(tmp_path / "run"))


def test_rewards_and_remote_together_stop_before_ray(tiny_config, tmp_path):
    from rewardhub.errors import UsageError

    cfg = tiny_config(reward={"remote": "http://127.0.0.1:9"})  # beside tiny.yaml's reward.rewards
    with pytest.raises(UsageError, match="reward.rewards and reward.remote are both set"):
        train(cfg, output=str(tmp_path / "run"))
