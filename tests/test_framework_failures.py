"""The TRL and verl integrations never turn a failure into a score: a failed call is None for TRL
(with a count in TRL's metrics) and a flag with the error text in verl's reward_extra_info, following
the term's on_failure; a batch that cannot be read is one clear error naming the field."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from rewardhub.adapters import to_trl
from rewardhub.adapters import to_verl
from rewardhub.errors import RewardExecutionError
from rewardhub.errors import UsageError

FLAKY = '''
def flaky(*, response, ground_truth, **kwargs):
    if response == "raise":
        raise ValueError("flaky failed on purpose")
    return 1.0 if response == str(ground_truth) else 0.0
'''


@pytest.fixture
def flaky(tmp_path):
    path = tmp_path / "flaky.py"
    path.write_text(FLAKY)
    return {"path": str(path), "function": "flaky", "executor": "inline"}


def _trl(reward_funcs, inputs, prompts, completions):
    """TRL's own GRPOTrainer._calculate_rewards on a minimal trainer; returns (rows, logged metrics)."""
    pytest.importorskip("torch")
    from accelerate import PartialState
    from trl import GRPOTrainer

    PartialState()  # TRL warns through accelerate's logger about a row no reward scored

    logged: list[tuple[str, float]] = []
    fake = SimpleNamespace(
        accelerator=SimpleNamespace(device="cpu", is_main_process=True),
        reward_funcs=reward_funcs,
        reward_processing_classes=[None] * len(reward_funcs),
        reward_func_names=[f.__name__ for f in reward_funcs],
        state=SimpleNamespace(global_step=0),
        _log_completion_extra=lambda *a, **k: None,
        _log_metric=lambda name, value: logged.append((name, value)),
        environments=None,
        args=SimpleNamespace(report_to=[]),
        _metrics={"train": {}},
        control=SimpleNamespace(should_evaluate=False),
        model=SimpleNamespace(training=True),
    )
    out = GRPOTrainer._calculate_rewards(fake, inputs, prompts, completions, [[1]] * len(completions))
    return out.tolist(), logged


def test_to_trl_a_failed_call_is_none_not_zero_and_is_counted(flaky):
    fn = to_trl(flaky)
    prompts = ["p1", "p2", "p3"]
    inputs = [{"prompt": p, "answer": a} for p, a in zip(prompts, ["a", "x", "c"])]
    rows, logged = _trl([fn], inputs, prompts, ["a", "raise", "b"])
    assert rows[0] == [1.0] and rows[2] == [0.0]
    assert math.isnan(rows[1][0])  # TRL's None ("not scored") becomes NaN, left out of the advantages
    assert logged == [("flaky/failed", 1.0)]
    assert fn(prompts=prompts, completions=["a", "raise", "b"], answer=["a", "x", "c"]) == [1.0, None, 0.0]


def test_to_trl_follows_an_on_failure_the_term_names(flaky):
    two = {"prompts": ["p"] * 2, "completions": ["raise", "a"], "answer": ["a", "a"]}
    assert to_trl({**flaky, "on_failure": "zero"})(**two) == [0.0, 1.0]
    assert math.isnan(to_trl({**flaky, "on_failure": "nan"})(**two)[0])
    with pytest.raises(RewardExecutionError, match="flaky failed on purpose"):
        to_trl({**flaky, "on_failure": "raise"})(**two)


def test_to_trl_without_a_ground_truth_column_is_an_error_naming_the_columns():
    fn = to_trl("math_verify", executor="inline")
    with pytest.raises(UsageError, match=r"needs a ground truth.*\n.*columns there: question"):
        fn(prompts=["q"], completions=["\\boxed{1}"], question=["what?"])
    with pytest.raises(UsageError, match="'gold'"):
        to_trl("math_verify", executor="inline", ground_truth_key="gold")(
            prompts=["q"], completions=["\\boxed{1}"], solution=["1"])


def test_to_trl_a_row_without_ground_truth_is_not_scored():
    fn = to_trl("math_verify", executor="inline")
    logged: list[tuple[str, float]] = []
    got = fn(prompts=["q", "q"], completions=["\\boxed{1}", "\\boxed{2}"], solution=["1", None],
             log_metric=lambda k, v: logged.append((k, v)))
    assert got == [1.0, None] and logged == [("math_verify/failed", 1.0)]


def test_to_verl_a_none_ground_truth_is_flagged_for_a_rewardhub_reward_and_passed_to_a_verl_one(flaky,
                                                                                               tmp_path):
    fn = to_verl(flaky)
    assert fn("src", "a", "a")["score"] == 1.0
    none = fn("src", "None", None)  # flaky would compare "None" == str(None): a silent 1.0
    assert none["score"] == 0.0 and none["acc"] is None and none["rewardhub_failed"] == 1.0
    assert "no ground truth" in none["rewardhub_error"] and set(none) == set(fn("src", "a", "a"))
    assert math.isnan(to_verl({**flaky, "on_failure": "nan"})("src", "None", None)["score"])
    with pytest.raises(RewardExecutionError, match="no ground truth"):
        to_verl({**flaky, "on_failure": "raise"})("src", "a", None)
    verl_fn = tmp_path / "verl_fn.py"  # a verl compute_score gets the None, as verl's naive passes it
    verl_fn.write_text("def cs(data_source, solution_str, ground_truth, extra_info=None):\n"
                       "    return 0.25 if ground_truth is None else 1.0\n")
    got = to_verl({"path": str(verl_fn), "function": "cs", "executor": "inline"})("src", "x", None)
    assert got["score"] == 0.25 and got["rewardhub_failed"] == 0.0


def test_to_verl_flags_a_failed_call_with_the_same_keys_as_a_good_one(flaky):
    fn = to_verl(flaky)
    good = fn("src", "a", "a")
    bad = fn("src", "raise", "a")
    assert good == {"score": 1.0, "acc": 1.0, "rewardhub_failed": 0.0, "rewardhub_error": ""}
    assert bad["score"] == 0.0 and bad["acc"] is None and bad["rewardhub_failed"] == 1.0
    assert "flaky failed on purpose" in bad["rewardhub_error"] and set(bad) == set(good)
