"""One command builds the reward registry once in its driver process (and once in the trainer's reward
client): each build scans the entry points and calls every plugin's hooks, and two builds of one
process could disagree (a file reward edited in between)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from rewardhub.cli import main
from rewardhub.registry import builds_in_process

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
CONFIG = {"reward": {"rewards": [{"name": "regex_match", "kwargs": {"pattern": "[0-9]"}},
                                 {"path": None, "function": "length"}]}}


def _config(tmp_path: Path) -> Path:
    """A config with a built-in reward and a file reward (resolved, imported and shipped by path)."""
    reward_file = tmp_path / "my_reward.py"
    reward_file.write_text("def length(response, **kw):\n    return len(response) / 10.0\n")
    cfg = json.loads(json.dumps(CONFIG))
    cfg["reward"]["rewards"][1]["path"] = str(reward_file)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _builds(*argv: str) -> int:
    before = builds_in_process()
    assert main(list(argv)) == 0
    return builds_in_process() - before


def test_check_builds_the_registry_once(tmp_path, capsys):
    assert _builds("check", str(_config(tmp_path))) == 1


def test_score_builds_the_registry_once(tmp_path, capsys):
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"prompt": "q", "response": r, "ground_truth": "1"}) + "\n"
                            for r in ("a 1", "b")))
    summary = tmp_path / "summary.json"
    assert _builds("score", str(_config(tmp_path)), str(data), "-o", str(tmp_path / "out.jsonl"),
                   "--summary-json", str(summary), "--no-progress") == 1
    assert json.loads(summary.read_text())["rewards"]  # provenance came from that one registry


@pytest.mark.ray
def test_train_builds_the_registry_once_in_the_driver_and_the_reward_client(
    tmp_path, session_ray, monkeypatch, capsys
):
    """``rewardhub train`` with data files (the ground truth each term needs is checked) and one step."""
    monkeypatch.setenv("REWARDHUB_CACHE", str(tmp_path / "cache"))  # the tiny model is built in the driver
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"what is {i} + 1?", "answer": str(i + 1)}) + "\n"
                            for i in range(4)))
    cfg = yaml.safe_load((EXAMPLES / "tiny.yaml").read_text())
    cfg["trainer"].update(mode="sync", total_steps=1, checkpoint_every=0)
    cfg["rollout"].update(n=2, prompts_per_step=2, max_new_tokens=4)
    cfg["data"] = {
        "train_files": [str(data)],
        "prompt_key": "prompt",
        "answer_key": "answer",
        "template": "plain",
    }
    cfg["reward"] = yaml.safe_load(_config(tmp_path).read_text())["reward"]
    config = tmp_path / "train.yaml"
    config.write_text(yaml.safe_dump(cfg))
    out = tmp_path / "run"
    assert _builds("train", str(config), "--output", str(out)) == 1
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 1
    clients = [w for w in summary["workers"] if w["role"] == "reward_client"]
    assert [c["registry_builds"] for c in clients] == [1]
    assert {r["name"] for r in summary["rewards"]} == {"regex_match", "length"}
