"""Group rewards see whole GRPO groups, wherever a batch is cut: ``rewardhub score``'s chunks and
``reward.remote``'s requests end only between groups, a group too large for a limit is an error naming
it, and the rows of one uid with two prompts are graded per prompt."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

TESTS = Path(__file__).resolve().parent
GROUP_CFG = """\
reward:
  rewards:
    - module: rewards_groups
      function: group_size
      kind: group
"""


def env() -> dict[str, str]:
    return {"PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}


def rows_of(n: int, size: int, *, shift: int = 0) -> list[dict[str, Any]]:
    return [{"prompt": f"q{(i + shift) // size}", "response": "r" * (i % 4 + 1),
             "extra_info": {"uid": (i + shift) // size}} for i in range(n)]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


@pytest.fixture
def group_cfg(tmp_path: Path) -> str:
    cfg = tmp_path / "groups.yaml"
    cfg.write_text(GROUP_CFG)
    return str(cfg)


@pytest.mark.timeout(300)
def test_score_keeps_600_rows_in_groups_of_6_whole(cli, tmp_path, group_cfg):
    data = write_jsonl(tmp_path / "d.jsonl", rows_of(600, 6))
    out = tmp_path / "o.jsonl"
    res = cli("score", group_cfg, data, "-o", str(out), env=env())
    assert res.returncode == 0, res.stderr
    scores = [r["score"] for r in read_jsonl(out)]
    assert len(scores) == 600
    assert {i: s for i, s in enumerate(scores) if s != 6.0} == {}  # rows 252-255 had 4.0


@pytest.mark.timeout(300)
def test_score_refuses_a_group_whose_rows_are_far_apart(cli, tmp_path, group_cfg):
    rows = rows_of(600, 1)
    for i, r in enumerate(rows):  # uid 0..299, then 0..299 again: each group's second row 300 rows on
        r["extra_info"]["uid"] = i % 300
        r["prompt"] = f"q{i % 300}"
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    res = cli("score", group_cfg, data, "-o", str(tmp_path / "o.jsonl"), env=env())
    assert res.returncode == 2, res.stderr
    assert "row 301 is of extra_info.uid=0, whose rows began at row 1" in res.stderr
    assert "sort the rows by group" in res.stderr


def test_one_uid_with_two_prompts_is_graded_per_prompt():
    from rewardhub.config.schema import validate_reward
    from rewardhub.execution import Runner

    rows = [{"prompt": p, "response": "x", "extra_info": {"uid": 7}} for p in ("a", "a", "b", "a")]
    cfg = {"rewards": [{"module": "rewards_groups", "function": "group_size", "kind": "group"}]}
    with Runner.from_config(validate_reward(cfg)) as runner:
        assert runner.score(rows).scores == [3.0, 3.0, 1.0, 3.0]  # not 1004.0: b graded against a's prompt


# ---- reward.remote's requests ------------------------------------------------------------------

@pytest.fixture(scope="module")
def group_server():
    from thread_server import ThreadServer

    from rewardhub.config.schema import validate_reward
    from rewardhub.execution import Runner

    cfg = {"rewards": [{"module": "rewards_groups", "function": "group_size", "kind": "group"}]}
    with Runner.from_config(validate_reward(cfg)) as runner:
        server = ThreadServer(runner, max_rows=10)
        try:
            yield server
        finally:
            server.close()


@pytest.mark.timeout(120)
def test_remote_requests_end_between_groups(group_server):
    from rewardhub.execution.remote import RemoteScorer

    scorer = RemoteScorer(group_server.url)
    res = scorer.score(rows_of(60, 6, shift=3))  # groups of 3, then of 6, each cut by max_rows 10 before
    assert res.scores == [3.0] * 3 + [6.0] * 54 + [3.0] * 3


@pytest.mark.timeout(120)
def test_remote_group_larger_than_max_rows_is_an_error_naming_it(group_server):
    from rewardhub.errors import RewardhubError
    from rewardhub.execution.remote import RemoteScorer

    with pytest.raises(RewardhubError, match=r"extra_info\.uid=1 has 12 rows, more than the reward "
                                             r"server's limit of 10 rows per request"):
        RemoteScorer(group_server.url).score(rows_of(6, 6) + rows_of(12, 12, shift=12))
