"""`rewardhub test`'s contract on the model rewards, with the tiny models of conftest.py."""

from __future__ import annotations

from rewardhub._contract import FAIL
from rewardhub._contract import run_contract


def test_reward_model_and_judge_keep_the_contract(tiny_rm, tiny_judge, judge_rubric):
    section = {"rewards": [
        # max_length: without it a 100,000-character response goes through the model whole, and the
        # contract fails it on its timeout (as it should: set max_length on a reward model)
        {"name": "reward_model", "kwargs": {"model_path": tiny_rm, "max_length": 256}},
        {"name": "judge", "kwargs": {"model_path": tiny_judge, "rubric": judge_rubric, "batch_size": 4,
                                     "max_response_chars": 200}}]}
    checks = run_contract(section, executors=("inline", "process"), default_timeout_s=30)
    assert [f"{c.term} / {c.contract}: {c.detail}" for c in checks if c.status == FAIL] == []
    assert {c.term for c in checks} == {"reward_model", "judge"}
