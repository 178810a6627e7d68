"""``rewardhub check`` answers as ``rewardhub train`` does on the same file (issue 43 §6): a config whose
``data.source`` names a task and that has no reward section runs the task's terms under train, so check
accepts it; one that names no task, or no reward at all, is refused by both."""

from __future__ import annotations

from pathlib import Path

import pytest

from rewardhub.config import load_plan
from rewardhub.errors import UsageError

pytest.importorskip("rewardhub_trainer")
pytest.importorskip("rewardhub_math")


MODEL = "model: {tiny: {arch: qwen2}}\ntrainer: {device: cpu}\n"


def _train_accepts(path: str) -> bool:
    from rewardhub_trainer.config import parse_config

    try:
        parse_config(load_plan(path, []))
    except UsageError:
        return False
    return True


@pytest.mark.parametrize("body,ok", [
    ("data: {source: math.arithmetic, size: 8, seed: 1}\n", True),
    ("data: {source: no.such_task}\n", False),
    ("data: {source: builtin}\n", False),
    ("data: {source: math.arithmetic, train_files: rows.parquet}\n", False),
])
def test_check_and_train_give_the_same_answer(tmp_path: Path, body: str, ok: bool) -> None:
    from rewardhub._commands.check import check_config

    path = tmp_path / "task.yaml"
    path.write_text(MODEL + body)
    assert _train_accepts(str(path)) is ok
    found = check_config(str(path), [])
    assert (not found["problems"]) is ok, found["problems"]
    if ok:
        assert [t["reward"] for t in found["terms"]] == ["math_verify"]
        assert any("task 'math.arithmetic'" in n for n in found["notes"])
    else:
        assert len(found["problems"]) == 1
