"""GRPO math without a model: advantages, the clipped surrogate, the KL estimator."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from rewardhub_trainer.learner import clipped_policy_loss  # noqa: E402
from rewardhub_trainer.learner import group_advantages  # noqa: E402
from rewardhub_trainer.learner import kl_k3  # noqa: E402
from rewardhub_trainer.learner import masked_mean  # noqa: E402


def test_advantages_are_normalised_within_each_group():
    r = torch.tensor([[1.0, 0.0, 0.0, 1.0], [3.0, 1.0, 2.0, 2.0]])
    adv = group_advantages(r, eps=0.0)
    assert torch.allclose(adv[0], torch.tensor([1.0, -1.0, -1.0, 1.0]))
    # group 2: mean 2, population std sqrt(0.5)
    assert torch.allclose(adv[1], torch.tensor([1.0, -1.0, 0.0, 0.0]) / math.sqrt(0.5))
    assert torch.allclose(adv.mean(dim=1), torch.zeros(2), atol=1e-6)


def test_unscaled_advantages_are_only_centred():
    r = torch.tensor([[4.0, 0.0]])
    assert torch.allclose(group_advantages(r, scale=False), torch.tensor([[2.0, -2.0]]))


def test_equal_rewards_give_zero_advantage():
    adv = group_advantages(torch.full((2, 4), 0.7))
    assert torch.equal(adv, torch.zeros(2, 4))


def test_nan_rewards_are_left_out_and_get_zero():
    r = torch.tensor([[1.0, float("nan"), 0.0, 1.0]])
    adv = group_advantages(r, eps=0.0)
    assert adv[0, 1] == 0.0
    # stats over [1, 0, 1]: mean 2/3, std sqrt(2/9)
    std = math.sqrt(2 / 9)
    assert torch.allclose(adv[0, [0, 2, 3]], torch.tensor([1 / 3, -2 / 3, 1 / 3]) / std)


def test_advantages_need_a_matrix():
    with pytest.raises(ValueError, match="groups, n"):
        group_advantages(torch.zeros(4))


def test_clipped_loss_equals_policy_gradient_inside_the_clip_range():
    logp = torch.log(torch.tensor([[0.5, 0.25, 0.1]])).requires_grad_()
    old = logp.detach().clone()
    adv = torch.tensor([2.0])
    mask = torch.tensor([[1.0, 1.0, 0.0]])  # the third token is padding
    loss, clip_frac = clipped_policy_loss(logp, old, adv, mask, clip_eps=0.2)
    assert loss.item() == pytest.approx(-2.0)  # ratio 1 everywhere: -adv
    loss.backward()
    # d/dlogp of -adv * exp(logp - old) / n_tokens = -adv / 2 on real tokens, 0 on padding
    assert torch.allclose(logp.grad, torch.tensor([[-1.0, -1.0, 0.0]]))
    assert clip_frac.item() == 0.0


def test_clipping_stops_the_gradient_past_the_bound():
    old = torch.zeros(1, 2)
    # token 0 ratio 1.5 (beyond 1 + eps) with positive advantage: clipped, no gradient
    # token 1 ratio 0.5 with positive advantage: min() keeps the unclipped term, gradient flows
    logp = torch.log(torch.tensor([[1.5, 0.5]])).requires_grad_()
    loss, clip_frac = clipped_policy_loss(logp, old, torch.tensor([1.0]), torch.ones(1, 2), 0.2)
    assert loss.item() == pytest.approx(-(1.2 + 0.5) / 2)
    loss.backward()
    assert logp.grad[0, 0].item() == 0.0
    assert logp.grad[0, 1].item() == pytest.approx(-0.5 / 2)
    assert clip_frac.item() == pytest.approx(0.5)


def test_clipping_with_negative_advantage_is_pessimistic():
    old = torch.zeros(1, 1)
    logp = torch.log(torch.tensor([[0.5]])).requires_grad_()  # ratio 0.5 < 1 - eps
    loss, _ = clipped_policy_loss(logp, old, torch.tensor([-1.0]), torch.ones(1, 1), 0.2)
    # -min(0.5 * -1, 0.8 * -1) = 0.8: the clipped term, constant in logp
    assert loss.item() == pytest.approx(0.8)
    loss.backward()
    assert logp.grad.item() == 0.0


def test_kl_k3_is_zero_at_the_reference_and_positive_elsewhere():
    a = torch.log(torch.tensor([0.2, 0.5, 0.9]))
    assert torch.allclose(kl_k3(a, a), torch.zeros(3))
    b = torch.log(torch.tensor([0.3, 0.4, 0.5]))
    assert bool((kl_k3(a, b) > 0).all())


VERL_COMPAT = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), ".venv", "verl-compat"
)
VERL_KL = """
import json, sys
import torch
from verl.trainer.ppo.core_algos import kl_penalty
logp, ref = (torch.tensor(v) for v in json.loads(sys.argv[1]))
print(json.dumps(kl_penalty(logp, ref, "low_var_kl").tolist()))
"""


@pytest.mark.timeout(180)
def test_kl_k3_is_verls_low_var_kl_clamped_where_the_policy_left_the_reference():
    """A token the reference finds far likelier than the policy (log-ratio 15) added exp(15) - 16 =
    3.27e6 to the KL; verl's ``low_var_kl`` clamps each token's KL to [-10, 10] (and its log-ratio to
    [-20, 20] before ``exp``), and so does ``kl_k3``: verl's own function on the same log-probs."""
    logp = torch.tensor([-16.0, -40.0, -1.0, -0.5, -0.1, -3.0, -2.0])
    ref = torch.tensor([-1.0, -0.01, -1.0, -0.3, -2.0, -0.5, -32.0])  # ref - logp: 15, 39.99, 0, ..., -30
    got = kl_k3(logp, ref)
    assert float(got[0]) == 10.0 and float(got[1]) == 10.0  # were 3.27e6 and 4.85e8
    assert float(got[6]) == 10.0  # log-ratio -30: exp(-20) + 20 - 1 = 19 before the clamp
    assert float(got[2]) == 0.0 and 0.0 < float(got[3]) < 10.0
    if not os.path.isdir(os.path.join(VERL_COMPAT, "verl")):
        pytest.skip("verl is not installed for the tests (make install puts it in .venv/verl-compat)")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([VERL_COMPAT, os.environ.get("PYTHONPATH", "")]))
    res = subprocess.run([sys.executable, "-c", VERL_KL, json.dumps([logp.tolist(), ref.tolist()])],
                         capture_output=True, text=True, env=env, timeout=150)
    assert res.returncode == 0, res.stderr
    want = torch.tensor(json.loads(res.stdout))
    assert torch.equal(got, want)


def test_kl_k3_gives_no_gradient_where_it_is_clamped():
    logp = torch.tensor([-16.0, -1.0], requires_grad=True)
    kl_k3(logp, torch.tensor([-1.0, -1.5])).sum().backward()
    assert logp.grad is not None
    assert float(logp.grad[0]) == 0.0 and float(logp.grad[1]) != 0.0


def test_masked_mean_ignores_padding():
    v = torch.tensor([[1.0, 3.0, 100.0]])
    m = torch.tensor([[1.0, 1.0, 0.0]])
    assert masked_mean(v, m).item() == 2.0
    assert masked_mean(v, m, dim=-1).tolist() == [2.0]
