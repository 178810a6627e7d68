"""Model rewards through the registry: the classifier matches a plain forward pass, the judge's
scores are parsed from real generations, legacy `reward_model.*` keys land on them."""

from __future__ import annotations

import math
import os
import sys
import warnings

import pytest

from rewardhub.distributed import runner_from_config
from rewardhub.errors import RewardhubDeprecationWarning
from rewardhub.errors import UsageError
from rewardhub.registry import build_registry

SAMPLES = [
    {"prompt": "What is 2+2?", "response": "4", "ground_truth": "4"},
    {
        "prompt": "Name a colour.",
        "response": "A long answer: the sky is blue on most days.",
        "ground_truth": "blue",
    },
    {"prompt": "Say hi", "response": "hi", "ground_truth": None},
    {"prompt": "Spell cat", "response": "c-a-t, which spells cat", "ground_truth": "cat"},
    {"prompt": "", "response": "x", "ground_truth": "y"},
]


def direct_scores(path, samples):
    """One sample at a time, no padding: what the reward model means."""
    import torch
    from transformers import AutoModelForSequenceClassification
    from transformers import ByT5Tokenizer

    tok = ByT5Tokenizer()
    model = AutoModelForSequenceClassification.from_pretrained(path).eval()
    out = []
    for s in samples:
        enc = tok(s["prompt"] + s["response"], return_tensors="pt", add_special_tokens=False)
        with torch.no_grad():
            out.append(model(**enc).logits[0, 0].item())
    return out


def test_both_are_registered_with_kind_model():
    reg = build_registry()
    for name in ("reward_model", "judge"):
        spec, _ = reg.load_full(name)
        assert (
            spec.kind == "model" and "reward_model" in spec.capabilities and spec.dist == "rewardhub-models"
        )


@pytest.mark.parametrize("executor", ["inline", "process"])
def test_reward_model_matches_a_plain_forward_pass(tiny_rm, executor):
    cfg = {"rewards": [{"name": "reward_model", "executor": executor,
                        "kwargs": {"model_path": tiny_rm, "batch_size": 3}}]}
    with runner_from_config(cfg) as runner:
        res = runner.score(SAMPLES)
    assert res.scores == pytest.approx(direct_scores(tiny_rm, SAMPLES), abs=1e-5)
    assert len(set(round(s, 6) for s in res.scores)) > 1  # a real model, not a constant
    assert res.metrics["rewards/reward_model/count"] == len(SAMPLES)


def test_legacy_reward_model_keys_score_on_a_reward_model_pool(tiny_rm, local_ray):
    """verl's ``reward_model.*`` keys: the classifier runs on its own Ray pool, from the registry."""
    from rewardhub.config import load_plan

    overrides = [
        "reward_model.enable=True",
        f"reward_model.model.path={tiny_rm}",
        "reward_model.num_workers=2",
        "reward_model.micro_batch_size_per_gpu=2",
        "reward_model.model.fsdp_config.param_offload=True",
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RewardhubDeprecationWarning)
        cfg = load_plan(None, overrides)
    assert [t.name for t in cfg.reward.rewards] == ["reward_model"]
    assert cfg.reward.reward_model.batch_size == 2
    with runner_from_config(cfg.reward) as runner:
        res = runner.score(SAMPLES)
        workers = runner.ray_workers()
    assert res.scores == pytest.approx(direct_scores(tiny_rm, SAMPLES), abs=1e-5)
    assert len(workers) == 2 and {w["pool"] for w in workers} == {"reward_model"}
    assert os.getpid() not in {w["pid"] for w in workers}
    assert len({w["registry_fingerprint"] for w in workers}) == 1
    assert res.metrics["rewards/reward_model/count"] == len(SAMPLES)


def test_reward_model_term_can_stay_in_process(tiny_rm):
    """An explicit executor on the term wins over the reward-model pool."""
    cfg = {"reward_model": {"enable": True, "model_path": tiny_rm},
           "rewards": [{"name": "reward_model", "executor": "inline"}]}
    with runner_from_config(cfg) as runner:
        res = runner.score(SAMPLES)
        assert runner.ray_workers() == []
    assert res.scores == pytest.approx(direct_scores(tiny_rm, SAMPLES), abs=1e-5)


def test_reward_model_without_a_model_names_the_keys():
    with runner_from_config({"rewards": [{"name": "reward_model", "on_failure": "raise"}]}) as runner:
        with pytest.raises(Exception) as info:
            runner.score(SAMPLES[:1])
    assert "reward.reward_model.model_path" in str(info.value) and "reward_model.model.path" in str(
        info.value
    )


def test_missing_model_path_is_a_clear_error(tmp_path):
    from rewardhub_models._loading import settings

    with pytest.raises(UsageError, match="does not exist"):
        settings({"model_path": str(tmp_path / "nope")})


def test_judge_scores_from_real_generations(tiny_judge, judge_rubric):
    cfg = {"rewards": [{"name": "judge", "kwargs": {"model_path": tiny_judge, "rubric": judge_rubric,
                                                    "batch_size": 2}}]}
    with runner_from_config(cfg) as runner:
        res = runner.score(SAMPLES)
    assert res.scores == pytest.approx([0.7] * len(SAMPLES))


def test_judge_without_a_score_fails_that_sample_by_policy(tiny_judge, judge_rubric):
    # one new token: "S", no number -> NaN -> the term's on_failure value, counted as an error
    cfg = {"rewards": [{"name": "judge", "on_failure": "zero",
                        "kwargs": {"model_path": tiny_judge, "rubric": judge_rubric, "max_new_tokens": 1}}]}
    with runner_from_config(cfg) as runner:
        res = runner.score(SAMPLES[:2])
    assert res.scores == [0.0, 0.0]
    assert res.metrics["rewards/judge/errors"] == 2


@pytest.mark.parametrize(
    "text,low,high,expected",
    [
        ("Score: 7", 0, 10, 0.7),
        ("score = 10", 0, 10, 1.0),
        ("I think 3", 0, 10, 0.3),
        ("Score: 4.5", 1, 5, 0.875),
        ("Score: 11", 0, 10, math.nan),
        ("no number", 0, 10, math.nan),
        ("Score: -1 then 5", 0, 10, math.nan),
    ],
)
def test_parse_score(text, low, high, expected):
    from rewardhub_models.judge import parse_score

    got = parse_score(text, low, high)
    assert (math.isnan(got) and math.isnan(expected)) or got == pytest.approx(expected)


def test_reward_worker_pool_puts_the_reward_model_on_its_own_pool(tiny_rm, local_ray):
    """The trainer's backend: other terms on the reward pool, the classifier on the reward-model pool."""
    from rewardhub.distributed import RewardWorkerPool

    cfg = {"reward_model": {"enable": True, "model_path": tiny_rm, "num_workers": 1},
           "rewards": [{"name": "reward_model", "weight": 2.0},
                       {"name": "regex_match", "kwargs": {"pattern": "[0-9]"}}],
           "workers": {"num_workers": 1, "num_cpus": 0}}
    with RewardWorkerPool(cfg) as pool:
        res = pool.score(SAMPLES)
        workers = pool.workers_info()
        pids = pool.last_pids
    rm = direct_scores(tiny_rm, SAMPLES)
    digits = [1.0 if any(ch.isdigit() for ch in s["response"]) else 0.0 for s in SAMPLES]
    assert [r["reward_model"] for r in res.rewards] == pytest.approx(rm, abs=1e-5)
    assert [r["regex_match"] for r in res.rewards] == digits
    assert res.scores == pytest.approx([2 * a + b for a, b in zip(rm, digits)], abs=1e-5)
    assert sorted(w["pool"] for w in workers) == ["reward", "reward_model"]
    assert pids == {w["pid"] for w in workers} and os.getpid() not in pids
    assert "reward_workers/reward_model/restarts" in res.metrics


def test_external_lib_is_imported_before_the_model_loads(tmp_path, monkeypatch):
    from rewardhub_models._loading import settings

    (tmp_path / "my_arch_lib.py").write_text("import builtins\nbuiltins._my_arch_registered = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "my_arch_lib", raising=False)
    settings({"model_path": str(tmp_path), "external_lib": "my_arch_lib"})
    import builtins

    assert builtins._my_arch_registered is True
    monkeypatch.delattr(builtins, "_my_arch_registered")
    with pytest.raises(UsageError, match="external_lib='no_such_lib_here' cannot be imported"):
        settings({"model_path": str(tmp_path), "external_lib": "no_such_lib_here"})
