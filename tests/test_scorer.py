"""One result type for every scorer: the kind of a failure (``error``, ``timeout``) travels as a field,
from a real `rewardhub serve` process to its client, and a request over the server's limits is refused
413 by the error's kind, not by its text."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from serve_process import Server

from rewardhub.errors import TOO_LARGE
from rewardhub.errors import UsageError
from rewardhub.execution import Runner
from rewardhub.execution.remote import RemoteScorer

pytest.importorskip("aiohttp")

CFG = """\
reward:
  rewards:
    - module: rewards_for_tests
      function: misbehave
      timeout_s: 2
"""
#: a score, a timeout, an error, and an error whose text says "timed out" (still an error)
ROWS = [{"response": r, "prompt": "p", "ground_truth": None, "data_source": None, "extra_info": {}}
        for r in ("ok:0.5", "hang", "raise", "says timed out")]
KINDS = [{}, {"misbehave": "timeout"}, {"misbehave": "error"}, {"misbehave": "error"}]


@pytest.fixture(scope="module")
def cfg(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("scorer") / "misbehave.yaml"
    path.write_text(CFG)
    return path


def test_error_kinds_travel_from_the_server_and_equal_local_scoring(cfg):
    from rewardhub.config import load_plan

    with Runner.from_config(load_plan(str(cfg)).reward) as runner:
        local = runner.score(ROWS)
    with Server(cfg, "--max-rows", "2") as server:
        scorer = RemoteScorer(server.url)
        remote = scorer.score(ROWS)  # 4 rows in two requests: the server's published limit is 2
        status, body = server.post("/score", {"rows": [{"response": "ok:0.1"}] * 3})
    assert local.error_kinds == remote.error_kinds == KINDS
    assert [c.status for c in remote.columns.values()] == [c.status for c in local.columns.values()]
    assert [sorted(e) for e in remote.errors] == [sorted(e) for e in local.errors]
    assert "RuntimeError: boom" in remote.errors[2]["misbehave"]
    assert remote.scores[0] == local.scores[0] == 0.5
    assert remote.scores[1:] == [None] * 3 and all(math.isnan(s) for s in local.scores[1:])
    for metric in ("errors", "timeouts", "mean"):
        key = f"rewards/misbehave/{metric}"
        assert remote.metrics[key] == local.metrics[key], key
    assert remote.metrics["rewards/misbehave/timeouts"] == 1.0
    assert status == 413 and "more than this server's limit of 2" in body["error"]


def test_a_request_over_the_limits_is_an_error_of_kind_too_large():
    from rewardhub.server._protocols import own_rows

    with pytest.raises(UsageError) as info:
        own_rows({"rows": [{"response": "a"}] * 3}, max_rows=2)
    assert info.value.kind == TOO_LARGE
    with pytest.raises(UsageError) as info:
        own_rows({"rows": [{"prompt": "no response"}]}, max_rows=2)
    assert info.value.kind == "error"
