"""The judges against a real OpenAI-compatible server: the demo model (SmolLM2-135M-Instruct) under
vLLM's API server on the CPU, started once and stopped by the session fixture ``served`` of conftest.py
(add tests here or beside it rather than start a second server); a few short requests: ``llm_judge``,
``llm_judge_group``, and the judging modes (``llm_judge_sampled`` with ``score_from: logprobs``, a
tournament, a rubric).
"""

from __future__ import annotations

import math
import re
import time
from pathlib import Path

import pytest

from rewardhub.execution import Runner

SAMPLES = [{"prompt": "What is 2 + 2?", "response": r, "ground_truth": "4", "data_source": "arith",
            "extra_info": {"uid": "g"}} for r in ("4", "The answer is 5.")]


#: a 135M model follows a short question (it echoes the default template's markers: no score, a failure)
SHORT = "How good is the answer {response} to the question {prompt}? Give a number from 0 to 10."
#: ...but writes no `Score: N` (e.g. '2 + 2 = 4\n4 + 4 = 8'): its reply's last number is read instead
LAST_NUMBER = r"(?s)(\d+)(?!.*\d)"


def test_llm_judge_on_a_served_model(served):
    """Every row gets one result: a score in range, or a failure naming the reply (never a silent 0);
    greedy replies are the same twice, so the results are too."""
    kw = {"base_url": served.base_url, "model": served.model}
    terms = [{"name": "llm_judge", "kwargs": {**kw, "max_tokens": 24, "template": SHORT,
                                              "score_regex": LAST_NUMBER}},
             {"name": "llm_judge_group", "kwargs": {**kw, "max_tokens": 24}}]
    with Runner.from_config({"rewards": terms}) as runner:
        first, second = runner.score(SAMPLES), runner.score(SAMPLES)
    for res in (first, second):
        for name in ("llm_judge", "llm_judge_group"):
            for row, err in zip(res.rewards, res.errors):
                value = row[name]
                assert (0 <= value <= 10 and name not in err) or (math.isnan(value) and "judge" in err[name])
    assert repr(first.rewards) == repr(second.rewards) and first.errors == second.errors
    assert all(0 <= r["llm_judge"] <= 10 for r in first.rewards), first.errors


#: a failure the judging modes report: its kind in the message (never a silent 0, a loss or a tie)
FAILED = re.compile(r"judge call failed \((no_verdict|refusal|no_logprobs|bad_reply)\)")


def _chat_requests(log: Path) -> int:
    """Chat completions the server has answered so far (uvicorn's access log, a line each)."""
    return log.read_text(errors="replace").count('"POST /v1/chat/completions')


def _served_calls(log: Path, before: int, want: int) -> int:
    """The chat requests the server logged since ``before``, once ``want`` have shown (the access line
    may be written just after the client has read the reply), or what it has after 30 s."""
    end = time.monotonic() + 30
    while _chat_requests(log) - before < want and time.monotonic() < end:
        time.sleep(0.2)
    return _chat_requests(log) - before


def _judged(served, name, rows, **kwargs):
    kw = {"base_url": served.base_url, "model": served.model, **kwargs}
    with Runner.from_config({"rewards": [{"name": name, "kwargs": kw}]}) as runner:
        return runner.score(rows)


@pytest.mark.timeout(300)
def test_scores_from_logprobs_on_a_served_model(served):
    """``score_from: logprobs``: vLLM returns top_logprobs, so every sample gets the expected score over
    the numbers among them (in range), 2 samples each, and each sample is one request to the server."""
    rows = [{"prompt": "What is 3 + 3?", "response": r, "ground_truth": "6"} for r in ("6", "It is 9.")]
    before = _chat_requests(served.log)
    res = _judged(served, "llm_judge_sampled", rows, score_from="logprobs", samples=2, max_tokens=4)
    assert res.errors == [{}, {}], res.errors
    assert all(0 <= s <= 10 for s in res.scores), res.scores
    assert [e["llm_judge_sampled"]["judge_calls"] for e in res.extra] == [2, 2]
    assert res.metrics["rewards/llm_judge_sampled/judge_calls"] == 4.0
    assert res.metrics["rewards/llm_judge_sampled/judge_failed"] == 0.0
    assert _served_calls(served.log, before, 4) == 4


@pytest.mark.timeout(300)
def test_tournament_on_a_served_model(served):
    """A group of 3 (one extra_info.uid), ``all_pairs_one_way``: 3 calls, as the server's log counts
    them too; each response gets its points in [0, 1], or a failure naming its kind (a tiny model may
    not write a verdict): never a silent 0."""
    rows = [{"prompt": "Name the capital of France.", "response": r, "ground_truth": "Paris",
             "extra_info": {"uid": "capital"}} for r in ("Paris", "Lyon", "The capital of France is Paris.")]
    before = _chat_requests(served.log)
    res = _judged(served, "llm_judge_pairwise", rows, mode="tournament", pattern="all_pairs_one_way",
                  max_tokens=12)
    for value, err in zip(res.scores, res.errors):
        assert (0 <= value <= 1 and not err) or (math.isnan(value) and FAILED.search(
            err["llm_judge_pairwise"])), (res.scores, res.errors)
    assert res.metrics["rewards/llm_judge_pairwise/judge_calls"] == 3.0
    failed = res.metrics["rewards/llm_judge_pairwise/judge_failed"]
    # a failed call fails both responses of its pair (2 or 3 of them); none failed: 2 games each
    assert sum(bool(e) for e in res.errors) in ({2, 3} if failed else {0}), (failed, res.errors)
    assert failed or all(e["llm_judge_pairwise"]["judge_games"] == 2 for e in res.extra)
    assert _served_calls(served.log, before, 3) == 3


@pytest.mark.timeout(300)
def test_rubric_on_a_served_model(served):
    """Two criteria in one call (max_criteria 2): one request; the weighted share met with each
    criterion's verdict in the row, or a failure naming its kind (never a criterion counted unmet)."""
    criteria = [{"name": "correct", "text": "The answer is Paris.", "weight": 3},
                {"name": "short", "text": "The answer is one sentence.", "weight": 1}]
    row = {"prompt": "Name the capital of France.", "response": "Paris.", "ground_truth": "Paris"}
    before = _chat_requests(served.log)
    res = _judged(served, "llm_judge_rubric", [row], criteria=criteria, max_criteria=2, max_tokens=16)
    value, err, extra = res.scores[0], res.errors[0], res.extra[0]["llm_judge_rubric"]
    if err:
        assert math.isnan(value) and FAILED.search(err["llm_judge_rubric"]), err
    else:
        met = {c["name"]: c["met"] for c in extra["criteria"]}
        assert set(met) == {"correct", "short"} and value == pytest.approx((3 * met["correct"]
                                                                            + met["short"]) / 4)
    assert extra["judge_calls"] == 1 and res.metrics["rewards/llm_judge_rubric/judge_calls"] == 1.0
    assert _served_calls(served.log, before, 1) == 1
