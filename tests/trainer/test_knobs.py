"""verl's training knobs: LR schedule with warm-up, entropy (metric and bonus), loss aggregation modes,
top-k."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from rewardhub_trainer.config import ModelConfig  # noqa: E402
from rewardhub_trainer.learner import GRPOLearner  # noqa: E402
from rewardhub_trainer.learner import LearnerSettings  # noqa: E402
from rewardhub_trainer.learner import TrainSample  # noqa: E402
from rewardhub_trainer.learner import aggregate_loss  # noqa: E402
from rewardhub_trainer.learner import lr_factor  # noqa: E402
from rewardhub_trainer.learner import response_logprobs  # noqa: E402


@pytest.fixture(scope="module")
def tiny_path(model_cache):
    from rewardhub_trainer.models import materialize

    return materialize(ModelConfig(tiny={"arch": "qwen2", "seed": 2}))


def test_lr_schedules_with_warm_up():
    assert [lr_factor(s, "constant", 2, 10) for s in range(4)] == [0.5, 1.0, 1.0, 1.0]
    assert [lr_factor(s, "linear", 0, 4) for s in range(5)] == [1.0, 0.75, 0.5, 0.25, 0.0]
    assert lr_factor(2, "linear", 2, 4, min_lr_ratio=0.1) == 1.0
    assert lr_factor(4, "linear", 2, 4, min_lr_ratio=0.1) == pytest.approx(0.1)
    cos = [lr_factor(s, "cosine", 1, 5) for s in range(6)]
    assert cos[0] == 1.0 and cos[1] == 1.0 and cos[3] == pytest.approx(0.5) and cos[5] == pytest.approx(0.0)
    assert all(a >= b for a, b in zip(cos[1:], cos[2:]))


def test_loss_aggregation_modes():
    loss = torch.tensor([[1.0, 3.0, 0.0], [2.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    assert float(aggregate_loss(loss, mask, "token-mean")) == pytest.approx(2.0)  # (1 + 3 + 2) / 3
    assert float(aggregate_loss(loss, mask, "seq-mean-token-mean")) == pytest.approx(2.0)  # (2 + 2) / 2
    assert float(aggregate_loss(loss, mask, "seq-mean-token-sum")) == pytest.approx(3.0)  # (4 + 2) / 2
    loss = torch.tensor([[1.0, 1.0, 1.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    assert float(aggregate_loss(loss, mask, "token-mean")) == pytest.approx(7 / 4)
    assert float(aggregate_loss(loss, mask, "seq-mean-token-mean")) == pytest.approx(2.5)


def _samples(learner):
    good = TrainSample([100, 101], [110, 111, 112], [], 1.0)
    bad = TrainSample([100, 101], [120], [], -1.0)
    with torch.no_grad():
        before, _ = response_logprobs(learner.model, [good, bad], 1.0)
    good.old_logprobs, bad.old_logprobs = before[0, :3].tolist(), before[1, :1].tolist()
    return [good, bad]


def test_entropy_metric_lr_metric_and_the_entropy_bonus(tiny_path):
    learner = GRPOLearner(
        tiny_path,
        LearnerSettings(lr=1e-2, lr_schedule="linear", lr_warmup_steps=1, total_steps=3, micro_batch_size=1),
    )
    samples = _samples(learner)
    ent: list = []
    with torch.no_grad():
        _, mask = response_logprobs(learner.model, samples, 1.0, entropy=ent)
    expected = float(aggregate_loss(ent[0], mask))
    stats = [learner.train_step(samples) for _ in range(3)]
    assert stats[0]["entropy"] == pytest.approx(expected, rel=1e-4)  # before the first update
    assert 0 < stats[0]["entropy"] <= math.log(learner.model.config.vocab_size) + 1e-4
    assert [s["lr"] for s in stats] == pytest.approx([1e-2, 1e-2, 5e-3])
    # no advantage: without a bonus nothing moves; with one, every update raises the entropy
    for coeff in (0.0, 10.0):
        flat = GRPOLearner(tiny_path, LearnerSettings(lr=1e-3, entropy_coeff=coeff))
        samples = [TrainSample(s.prompt_ids, s.response_ids, s.old_logprobs, 0.0) for s in _samples(flat)]
        seen = [flat.train_step(samples)["entropy"] for _ in range(3)]
        if coeff:
            assert seen[0] < seen[1] < seen[2]
        else:
            assert seen[0] == seen[1] == seen[2]


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_micro_batches_give_the_whole_batch_loss(tiny_path, mode):
    """A batch split into micro-batches gets the same gradient step as in one piece, in every mode."""
    params = []
    for mbs in (1, 8):
        learner = GRPOLearner(
            tiny_path, LearnerSettings(lr=1e-2, loss_agg_mode=mode, micro_batch_size=mbs), seed=0
        )
        stats = learner.train_step(_samples(learner))
        params.append((stats["loss/policy"], stats["grad_norm"]))
    # the policy loss is ~0 here (ratio 1, advantages summing to 0); one sample per micro-batch takes the
    # full-logits path and eight the shared-prompt one, which round differently (~1e-7): hence abs
    assert params[0] == pytest.approx(params[1], rel=1e-4, abs=1e-6)


def test_top_k_limits_sampling(tiny_path):
    from rewardhub_trainer.engine import TransformersEngine

    engine = TransformersEngine(tiny_path)
    prompt = engine.format_prompt("hi", "plain")
    out = engine.generate([prompt], n=4, max_new_tokens=6, temperature=1.0, top_p=1.0, seed=0, top_k=1)
    greedy = engine.generate([prompt], n=1, max_new_tokens=6, temperature=0.0, top_p=1.0, seed=0)
    assert {tuple(c.response_ids) for c in out[0]} == {tuple(greedy[0][0].response_ids)}


def test_stop_strings_and_stop_token_ids_end_a_response(tiny_path):
    from rewardhub_trainer.engine import TransformersEngine

    engine = TransformersEngine(tiny_path)
    prompt = engine.format_prompt("what?", "plain")
    kw = {"n": 1, "max_new_tokens": 12, "temperature": 0.0, "top_p": 1.0, "seed": 0}
    full = engine.generate([prompt], **kw)[0][0]
    assert len(full.response_ids) == 12 and not full.finished
    # a token id of the greedy response as a stop id: the response ends with it, finished
    by_id = engine.generate([prompt], stop_token_ids=[full.response_ids[4]], **kw)[0][0]
    cut = full.response_ids.index(full.response_ids[4]) + 1
    assert by_id.response_ids == full.response_ids[:cut] and by_id.finished
    assert by_id.logprobs == pytest.approx(full.logprobs[:cut], abs=1e-5)
    # a piece of its text as a stop string: the response ends where that text is complete
    stop = full.text[3:5]
    assert len(stop) == 2
    by_text = engine.generate([prompt], stop=["never there", stop], **kw)[0][0]
    assert by_text.finished and by_text.text.endswith(stop) and stop not in by_text.text[:-1]
    assert by_text.response_ids == full.response_ids[:len(by_text.response_ids)]


@pytest.mark.parametrize(
    ("section", "values", "message"),
    [
        (
            "rollout",
            {"stop": "</answer>"},
            "rollout.stop='</answer>' is not valid\nexpected a list of strings",
        ),
        (
            "rollout",
            {"stop_token_ids": [1, "2"]},
            r"rollout.stop_token_ids=\[1, '2'\] is not valid\nexpected a list of integers",
        ),
        (
            "trainer",
            {"lr_schedule": "step"},
            "trainer.lr_schedule='step' is not valid\nallowed: constant, linear, cosine",
        ),
        (
            "trainer",
            {"loss_agg_mode": "seq-sum"},
            "trainer.loss_agg_mode='seq-sum' is not valid\nallowed: token-mean, ",
        ),
        (
            "trainer",
            {"min_lr_ratio": 2.0},
            "trainer.min_lr_ratio=2.0 is not valid\nallowed: a value >= 0 and <= 1",
        ),
        (
            "rollout",
            {"top_k": -2},
            "rollout.top_k=-2 is not valid: -1 or 0 samples among all tokens\nallowed: a value >= -1",
        ),
    ],
)
def test_bad_knobs_name_the_key(section, values, message):
    from rewardhub.errors import UsageError
    from rewardhub_trainer.config import parse_config

    cfg = {
        "model": {"tiny": {"arch": "qwen2"}},
        "reward": {"rewards": [{"name": "exact_match"}]},
        section: values,
    }
    with pytest.raises(UsageError, match=message):
        parse_config(cfg)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
def test_samples_without_a_gradient_skip_the_backward_and_change_nothing(tiny_path, monkeypatch, mode):
    """Advantage-0 samples (no KL, no entropy bonus) get a metrics-only forward: same gradient, same metrics.

    The gradients are compared before the optimizer step, to float tolerance: the live samples are padded
    with the others in the full run (matmuls of another shape, other roundings), and Adam's first step,
    ``lr * g / |g|``, would turn a rounding difference in a near-zero gradient into one of 2 lr."""
    import rewardhub_trainer.learner as learner_mod

    def batch(learner):
        good, bad = _samples(learner)
        flat = [TrainSample([100, 102, 103], [130 + i, 131], [], 0.0) for i in range(3)]
        with torch.no_grad():
            lp, _ = response_logprobs(learner.model, flat, 1.0)
        for i, s in enumerate(flat):
            s.old_logprobs = (lp[i, :2] - 0.05).tolist()
        return [good, *flat, bad]

    results, grad_modes = [], []
    real, real_check = learner_mod.response_logprobs, learner_mod.without_gradient
    monkeypatch.setattr(learner_mod, "response_logprobs",
                        lambda m, chunk, *a, **k: grad_modes.append((len(chunk), torch.is_grad_enabled()))
                        or real(m, chunk, *a, **k))
    for check in (lambda *a: False, real_check):  # every sample through backward (as before), then skipped
        monkeypatch.setattr(learner_mod, "without_gradient", check)
        learner = GRPOLearner(tiny_path, LearnerSettings(lr=1e-2, loss_agg_mode=mode), seed=0)
        samples = batch(learner)
        grad_modes.clear()
        grads: dict[str, torch.Tensor] = {}
        step = learner.optimizer.step
        monkeypatch.setattr(
            learner.optimizer,
            "step",
            lambda *a, **k: (
                grads.update(
                    {n: p.grad.clone() for n, p in learner.model.named_parameters() if p.grad is not None}
                )
                or step(*a, **k)
            ),
        )
        stats = learner.train_step(samples)
        results.append((stats, grads, list(grad_modes)))
    (full, g_full, _), (skipped, g_skip, modes) = results
    assert modes == [(2, True), (3, False)]  # the three advantage-0 samples: a forward without autograd
    for key in ("loss/policy", "entropy", "grad_norm", "clip_frac"):
        assert skipped[key] == pytest.approx(full[key], rel=1e-4, abs=1e-6), key
    assert full["grad_norm"] > 0 and (
        full["samples/without_gradient"],
        skipped["samples/without_gradient"],
    ) == (0, 3)
    assert g_full.keys() == g_skip.keys() and len(g_full) > 5
    for k in g_full:
        assert torch.allclose(g_full[k], g_skip[k], atol=1e-7, rtol=1e-4), (
            k,
            float((g_full[k] - g_skip[k]).abs().max()),
        )
    # all of a batch without a gradient: the optimizer still steps (on zero gradients), as before
    flat = GRPOLearner(tiny_path, LearnerSettings(lr=1e-2), seed=0)
    assert flat.train_step(batch(flat)[1:4])["optim/skipped_steps"] == 0 and flat.version == 1


def test_the_learner_settings_are_the_plans_own_keys():
    """The learner gets one typed object read off the plan (no string-keyed copy of the trainer's keys)."""
    import dataclasses

    from rewardhub_trainer.config import parse_config

    trainer = {"lr": 3e-4, "kl_coef": 0.01, "clip_eps": 0.3, "clip_ratio_c": 2.5, "ppo_epochs": 2,
               "micro_batch_size": 4, "max_grad_norm": 0.5, "weight_decay": 0.1, "lr_schedule": "cosine",
               "lr_warmup_steps": 2, "min_lr_ratio": 0.1, "total_steps": 7, "entropy_coeff": 0.001,
               "loss_agg_mode": "token-mean", "device": "cpu", "autocast": "none"}
    cfg = parse_config({"model": {"tiny": {"arch": "qwen2"}, "dtype": "float32"},
                        "reward": {"rewards": [{"name": "exact_match"}]},
                        "rollout": {"temperature": 0.7}, "trainer": trainer})
    settings = cfg.learner_settings()
    assert isinstance(settings, LearnerSettings)
    assert dataclasses.asdict(settings) == {**trainer, "temperature": 0.7, "dtype": "float32"}
