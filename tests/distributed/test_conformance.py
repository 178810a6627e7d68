"""One conformance test for the three scorers (issue 44 §1): a Runner here, a pool of Ray reward workers
and a ``rewardhub serve`` server, each opened by :func:`rewardhub.scorers.open_scorer`, give the same
terms and the same rows for the same text and trajectory samples."""

from __future__ import annotations

import math

import pytest
from serve_process import Server

from rewardhub.distributed import PoolSettings
from rewardhub.distributed import RewardWorkerPool
from rewardhub.execution import Runner
from rewardhub.execution.remote import RemoteScorer
from rewardhub.scorers import open_scorer

pytest.importorskip("aiohttp")
pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]

CFG = """\
reward:
  rewards:
    - name: exact_match
    - name: regex_match
      alias: boxed
      weight: 0.5
      kwargs: {pattern: '\\\\boxed\\{.+\\}'}
      on_failure: zero
    - name: tool_call_format
      weight: 2.0
"""


def _call(name: str, arguments: str) -> dict:
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


#: two text rows and two trajectories (the text reward reads a trajectory's last reply)
SAMPLES = [
    {"prompt": "2+2?", "response": "\\boxed{4}", "ground_truth": "\\boxed{4}", "data_source": "t",
     "extra_info": {}},
    {"prompt": "3+3?", "response": "7", "ground_truth": "6", "data_source": "t", "extra_info": {}},
    {"messages": [{"role": "user", "content": "add 2 and 2"},
                  {"role": "assistant", "content": "", "tool_calls": [_call("add", '{"a": 2, "b": 2}')]},
                  {"role": "tool", "content": "4"}, {"role": "assistant", "content": "4"}],
     "ground_truth": "4", "data_source": "t", "extra_info": {}},
    {"messages": [{"role": "user", "content": "add"},
                  {"role": "assistant", "content": "", "tool_calls": [_call("add", '{"a": ')]},
                  {"role": "assistant", "content": "no"}],
     "ground_truth": "4", "data_source": "t", "extra_info": {}},
]
#: what callers read of a term, wherever it runs (the executor is where it runs: it differs)
SAME = ("name", "reward", "on_failure", "weight", "reads", "needs_ground_truth", "adapter")


def _rows(res):
    return [(None if s is None or math.isnan(s) else round(s, 12), r, sorted(e))
            for s, r, e in zip(res.scores, res.rewards, res.errors)]


def test_a_runner_a_ray_pool_and_a_server_give_the_same_terms_and_rows(tmp_path, local_ray):
    cfg = tmp_path / "reward.yaml"
    cfg.write_text(CFG)
    from rewardhub.config import load_plan

    reward = load_plan(str(cfg)).reward
    local = open_scorer(reward)
    pool = open_scorer(reward, workers=PoolSettings(num_workers=1))
    with Server(cfg) as server:
        remote = open_scorer({"remote": server.url})
        scorers = {"runner": local, "pool": pool, "server": remote}
        assert [type(s) for s in scorers.values()] == [Runner, RewardWorkerPool, RemoteScorer]
        try:
            facts = {k: [tuple(getattr(f, a) for a in SAME) for f in s.facts] for k, s in scorers.items()}
            rows = {k: _rows(s.score(SAMPLES)) for k, s in scorers.items()}
            provenance = {k: [(p["name"], p["reward"], p["dist"], p["version"]) for p in s.provenance()]
                          for k, s in scorers.items()}
            figures = {k: s.pool_figures() for k, s in scorers.items()}
        finally:
            for s in scorers.values():
                s.close()
    assert facts["runner"] == facts["pool"] == facts["server"]
    assert [f[0] for f in facts["runner"]] == ["exact_match", "boxed", "tool_call_format"]
    assert rows["runner"] == rows["pool"] == rows["server"]
    assert [r[0] for r in rows["runner"]] == [1.5, 0.0, 3.0, 0.0]
    assert provenance["runner"] == provenance["pool"] == provenance["server"]
    assert {f.executor for f in pool.facts} == {"ray"}
    # what callers ask instead of the scorer's type: only the Runner drops calls not started on cancel;
    # only a pool of this process has figures (a server's pools are its own)
    assert {k: s.cancels for k, s in scorers.items()} == {"runner": True, "pool": False, "server": False}
    assert figures["runner"] == figures["server"] == []
    assert [f["pool"] for f in figures["pool"]] == ["reward"] and figures["pool"][0]["workers"]["now"] == 1
