"""Exported rewards run under the real TRL GRPOTrainer reward path and verl's calling convention."""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import pytest

from rewardhub.adapters import to_trl
from rewardhub.adapters import to_verl


def _trl_calculate_rewards(reward_funcs, inputs, prompts, completions):
    """Call TRL's own GRPOTrainer._calculate_rewards with a minimal trainer object."""
    torch = pytest.importorskip("torch")
    from trl import GRPOTrainer

    fake = SimpleNamespace(
        accelerator=SimpleNamespace(device="cpu", is_main_process=True),
        reward_funcs=reward_funcs,
        reward_processing_classes=[None] * len(reward_funcs),
        reward_func_names=[f.__name__ for f in reward_funcs],
        state=SimpleNamespace(global_step=0),
        _log_completion_extra=lambda *a, **k: None,
        _log_metric=lambda *a, **k: None,
        environments=None,
        args=SimpleNamespace(report_to=[]),
        _metrics={"train": {}},
        control=SimpleNamespace(should_evaluate=False),
        model=SimpleNamespace(training=True),
    )
    out = GRPOTrainer._calculate_rewards(fake, inputs, prompts, completions, [[1]] * len(completions))
    assert isinstance(out, torch.Tensor)
    return out.tolist()


def test_trl_reward_func_inside_trl():
    prompts = ["What is 2+2?", "What is 3+3?", [{"role": "user", "content": "1+1?"}]]
    completions = ["\\boxed{4}", "it is 7", [{"role": "assistant", "content": "\\boxed{2}"}]]
    inputs = [{"prompt": p, "solution": s, "data_source": "math"} for p, s in zip(prompts, ["4", "6", "2"])]
    fns = [to_trl("math_verify", executor="thread", timeout_s=20), to_trl("regex_match", kwargs={"pattern": "boxed"})]
    assert [f.__name__ for f in fns] == ["math_verify", "regex_match"]
    rows = _trl_calculate_rewards(fns, inputs, prompts, completions)
    assert rows == [[1.0, 1.0], [0.0, 0.0], [1.0, 1.0]]


def test_verl_compute_score_signature_and_values():
    compute_score = to_verl("math_verify", executor="inline")
    params = list(inspect.signature(compute_score).parameters)
    assert params[:4] == ["data_source", "solution_str", "ground_truth", "extra_info"]
    # verl's naive reward manager calls it with keywords
    got = compute_score(data_source="openai/gsm8k", solution_str="... #### so 72", ground_truth="72",
                        extra_info={"index": 0})
    assert got == {"score": 1.0, "extracted": 1.0}
    assert to_verl("exact_match")("x", "paris", "Paris") == 1.0
