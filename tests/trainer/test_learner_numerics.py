"""No NaN reaches the weights: extreme behaviour log-probs, non-finite losses; the version counts updates."""

from __future__ import annotations

import math

import pytest

from rewardhub_trainer.config import ModelConfig


@pytest.fixture(scope="module")
def tiny_path(model_cache):
    from rewardhub_trainer.models import materialize

    return materialize(ModelConfig(tiny={"arch": "qwen2", "seed": 2}))


def _samples(learner, advantages):
    """Responses with their true log-probs under the learner's current weights."""
    import torch

    from rewardhub_trainer.learner import TrainSample
    from rewardhub_trainer.learner import response_logprobs

    samples = [
        TrainSample([100, 101, 102], [110 + k, 111 + k, 112 + k], [], a) for k, a in enumerate(advantages)
    ]
    with torch.no_grad():
        lp, _ = response_logprobs(learner.model, samples, 1.0)
    for i, s in enumerate(samples):
        s.old_logprobs = lp[i, : len(s.response_ids)].tolist()
    return samples


def _weights(learner):
    return {k: v.detach().clone() for k, v in learner.model.state_dict().items()}


def _all_finite(weights) -> bool:
    import torch

    return all(bool(torch.isfinite(v).all()) for v in weights.values())


@pytest.mark.parametrize("extreme", [-1e4, -1e30, float("-inf")])
def test_one_extreme_old_logprob_leaves_the_weights_finite(tiny_path, extreme):
    import torch

    from rewardhub_trainer.learner import GRPOLearner
    from rewardhub_trainer.learner import LearnerSettings
    from rewardhub_trainer.learner import clipped_policy_loss

    learner = GRPOLearner(tiny_path, LearnerSettings(lr=1e-3))
    samples = _samples(learner, [1.0, -1.0, 0.5, -0.5])
    samples[0].old_logprobs[1] = extreme
    samples[1].old_logprobs[0] = extreme
    # the input is extreme enough: without the clamp the gradient of this loss is not finite
    logp = torch.tensor([[-1.0, -2.0], [-1.5, -0.5]], requires_grad=True)
    old = torch.tensor([[-1.0, extreme], [extreme, -0.5]])
    adv, mask = torch.tensor([1.0, -1.0]), torch.ones(2, 2)
    ratio = torch.exp(logp - old)
    unclamped = -torch.minimum(ratio * adv[:, None], torch.clamp(ratio, 0.8, 1.2) * adv[:, None]).mean()
    unclamped.backward()
    assert not (math.isfinite(float(unclamped.detach())) and bool(torch.isfinite(logp.grad).all()))
    logp.grad = None
    loss, _ = clipped_policy_loss(logp, old, adv, mask, 0.2)
    loss.backward()
    assert math.isfinite(float(loss.detach())) and bool(torch.isfinite(logp.grad).all())

    before = _weights(learner)
    stats = learner.train_step(samples)
    after = _weights(learner)
    assert _all_finite(after)
    assert stats["optim/skipped_steps"] == 0 and learner.version == 1
    assert math.isfinite(stats["loss/policy"]) and math.isfinite(stats["grad_norm"])
    assert any(not torch.equal(before[k], after[k]) for k in before)  # it did learn from the batch
    learner.state_dict()  # finite: can be sent to the rollouters


def test_a_non_finite_loss_skips_the_update_and_is_counted(tiny_path):
    import torch

    from rewardhub_trainer.learner import GRPOLearner
    from rewardhub_trainer.learner import LearnerSettings

    learner = GRPOLearner(tiny_path, LearnerSettings(lr=1e-3))
    before = _weights(learner)
    opt_before = len(learner.optimizer.state)
    samples = _samples(learner, [1.0, -1.0])
    samples[0].old_logprobs[0] = float("nan")  # a NaN is no extreme value: the clamp keeps it NaN
    for k in (1, 2):
        stats = learner.train_step(samples)
        assert stats["optim/skipped_steps"] == 1 and stats["optim/nonfinite_in_row"] == k
        assert learner.version == 0
    after = _weights(learner)
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert len(learner.optimizer.state) == opt_before == 0  # Adam's moments never saw the NaN
    stats = learner.train_step(_samples(learner, [1.0, -1.0]))  # a good batch: counting starts again
    assert stats["optim/skipped_steps"] == 0 and stats["optim/nonfinite_in_row"] == 0
    assert learner.version == 1 and _all_finite(_weights(learner))


def test_non_finite_weights_are_never_handed_out(tiny_path):
    import torch

    from rewardhub_trainer.learner import GRPOLearner
    from rewardhub_trainer.learner import LearnerSettings

    learner = GRPOLearner(tiny_path, LearnerSettings())
    with torch.no_grad():
        next(learner.model.parameters())[0, 0] = float("inf")
    with pytest.raises(FloatingPointError, match="non-finite weights in "):
        learner.state_dict()


def test_the_policy_version_counts_optimizer_updates(tiny_path):
    from rewardhub_trainer.learner import GRPOLearner
    from rewardhub_trainer.learner import LearnerSettings

    learner = GRPOLearner(tiny_path, LearnerSettings(lr=1e-3, ppo_epochs=3))
    learner.train_step(_samples(learner, [1.0, -1.0]))
    assert learner.version == 3
    learner.train_step(_samples(learner, [0.5, -0.5]))
    assert learner.version == 6
