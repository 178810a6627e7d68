"""The loss is composed as verl composes it (issue 27 §2 and verl's dual clip).

verl's actor (``dp_actor.update_policy`` with ``core_algos.compute_policy_loss`` / ``agg_loss``):
every term is aggregated by ``loss_agg_mode``, then ``pg_loss - entropy_coeff * entropy + kl_coef * kl``;
with ``clip_ratio_c`` a negative advantage's per-token loss is at most ``clip_ratio_c * |A|``. The
references below write those formulas out on the whole batch in one piece; the learner must give the
same loss and gradient whatever its micro-batches (two ranks: tests/trainer/test_ddp.py).
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from rewardhub_trainer.config import ModelConfig  # noqa: E402
from rewardhub_trainer.learner import GRPOLearner  # noqa: E402
from rewardhub_trainer.learner import LearnerSettings  # noqa: E402
from rewardhub_trainer.learner import TrainSample  # noqa: E402
from rewardhub_trainer.learner import response_logprobs  # noqa: E402

MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")
RTOL, ATOL = 1e-4, 1e-6


@pytest.fixture(scope="module")
def tiny_path(model_cache):
    from rewardhub_trainer.models import materialize

    return materialize(ModelConfig(tiny={"arch": "qwen2", "seed": 4}))


def verl_agg(mat: torch.Tensor, mask: torch.Tensor, mode: str) -> torch.Tensor:
    """verl's ``agg_loss``, written out."""
    mat = mat * mask
    if mode == "token-mean":
        return mat.sum() / mask.sum()
    if mode == "seq-mean-token-sum":
        return mat.sum(-1).mean()
    return (mat.sum(-1) / mask.sum(-1)).mean()


def verl_pg(logp, old, adv, eps, clip_ratio_c):
    """verl's ``compute_policy_loss`` per token (vanilla, dual-clip)."""
    ratio = torch.exp(torch.clamp(logp - old, -20.0, 20.0))
    adv = adv.unsqueeze(-1)
    pg1 = -adv * ratio
    pg2 = -adv * torch.clamp(ratio, 1 - eps, 1 + eps)
    clip1 = torch.maximum(pg1, pg2)
    if not clip_ratio_c:
        return clip1
    pg3 = -adv * clip_ratio_c
    return torch.where(adv < 0, torch.minimum(pg3, clip1), clip1)


def _perturb(model, seed: int = 1, scale: float = 0.05) -> None:
    """Move the policy away from the reference (so the KL term and its gradient are not 0)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(scale * torch.randn(p.shape, generator=gen))


def _batch(learner) -> list[TrainSample]:
    """Five responses of unequal lengths; behaviour log-probs off the policy's, one far below it (a ratio
    near e^2.5 on a negative advantage: the dual clip's case)."""
    gen = torch.Generator().manual_seed(0)
    lengths, advantages = (7, 1, 4, 2, 5), (1.0, -0.5, -1.3, 0.8, 0.4)
    samples = [
        TrainSample(
            [40 + k, 41, 42][: 2 + k % 2], torch.randint(50, 200, (n,), generator=gen).tolist(), [], a
        )
        for k, (n, a) in enumerate(zip(lengths, advantages))
    ]
    with torch.no_grad():
        lp, _ = response_logprobs(learner.model, samples, 1.0)
    for i, s in enumerate(samples):
        shift = -2.5 if i == 2 else 0.0
        s.old_logprobs = (
            lp[i, : len(s.response_ids)] + shift + 0.3 * torch.randn(len(s.response_ids), generator=gen)
        ).tolist()
    return samples


def _learner(path, **kw) -> GRPOLearner:
    learner = GRPOLearner(path, LearnerSettings(lr=1e-2, max_grad_norm=1e9, **kw), seed=0)
    if learner.ref is not None:
        _perturb(learner.model)
    return learner


def _reference(
    learner: GRPOLearner, samples: list[TrainSample]
) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
    """verl's loss of the whole batch in one piece: its terms and the gradient."""
    s = learner.settings
    learner.model.zero_grad(set_to_none=True)
    ent: list = []
    logp, mask = response_logprobs(learner.model, samples, s.temperature, entropy=ent, entropy_grad=True)
    old = torch.zeros_like(logp)
    for i, c in enumerate(samples):
        old[i, : len(c.old_logprobs)] = torch.tensor(c.old_logprobs)
    adv = torch.tensor([c.advantage for c in samples])
    mask = mask.float()
    pg = verl_agg(verl_pg(logp, old, adv, s.clip_eps, s.clip_ratio_c), mask, s.loss_agg_mode)
    entropy = verl_agg(ent[0], mask, s.loss_agg_mode)
    loss = pg - s.entropy_coeff * entropy
    kl = torch.zeros(())
    if learner.ref is not None:
        with torch.no_grad():
            ref, _ = response_logprobs(learner.ref, samples, s.temperature)
        # verl's low_var_kl (k3), within its [-10, 10] clamp here
        delta = torch.clamp(ref - logp, -20.0, 20.0)
        kld = torch.exp(delta) - delta - 1
        assert float(kld.detach().abs().max()) < 10
        kl = verl_agg(kld, mask, s.loss_agg_mode)
        loss = loss + s.kl_coef * kl
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in learner.model.named_parameters()}
    learner.model.zero_grad(set_to_none=True)
    terms = {
        k: float(v.detach())
        for k, v in (("loss/policy", pg), ("loss/total", loss), ("entropy", entropy), ("kl", kl))
    }
    return terms, grads


@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", MODES)
def test_kl_and_entropy_both_reach_the_loss_in_every_mode_and_micro_batching(tiny_path, mode):
    """KL on, entropy bonus on, dual clip on: the loss, its terms and its gradient are verl's, the same
    for micro-batches of 1, 2 and the whole batch. (Today's code dropped the entropy bonus when KL was
    on, and averaged the KL per sequence in every mode.)"""
    kw = {"kl_coef": 0.5, "entropy_coeff": 0.05, "clip_ratio_c": 3.0, "loss_agg_mode": mode}
    want, want_grads = _reference(_learner(tiny_path, **kw), _batch(_learner(tiny_path, **kw)))
    assert want["kl"] > 1e-4 and want["entropy"] > 0  # both terms are there to be lost
    for mbs in (1, 2, 5):
        learner = _learner(tiny_path, micro_batch_size=mbs, **kw)
        samples = _batch(learner)
        learner.optimizer.zero_grad(set_to_none=True)
        assert learner.gradients(samples)
        for name, p in learner.model.named_parameters():
            torch.testing.assert_close(
                p.grad, want_grads[name], rtol=RTOL, atol=ATOL, msg=lambda m: f"{mbs} {name}: {m}"
            )
        stats = learner.train_step(samples)
        for key, value in want.items():
            assert stats[key] == pytest.approx(value, rel=RTOL, abs=ATOL), (mbs, key)
        assert stats["loss/total"] == pytest.approx(
            stats["loss/policy"] - 0.05 * stats["entropy"] + 0.5 * stats["kl"], rel=RTOL, abs=ATOL)
        assert stats["clip_frac/dual"] > 0  # the shifted sample's tokens


def test_dual_clip_bounds_a_negative_advantage_loss():
    """verl's ``clip_ratio_c``: for A < 0 the per-token loss is min(max(-A r, -A clip(r)), -A c)."""
    from rewardhub_trainer.learner import clipped_policy_loss
    from rewardhub_trainer.learner import policy_loss_per_token

    ratios = torch.tensor([[0.5, 1.0, 2.0, 3.5, 50.0]])
    old = torch.zeros_like(ratios)
    logp = torch.log(ratios).requires_grad_(True)
    for adv, c, want in [
        (-1.0, 3.0, [0.8, 1.0, 2.0, 3.0, 3.0]),    # bounded by c * |A| = 3
        (-2.0, 3.0, [1.6, 2.0, 4.0, 6.0, 6.0]),    # by 6
        (-1.0, 0.0, [0.8, 1.0, 2.0, 3.5, 50.0]),   # off: plain PPO clip
        (1.0, 3.0, [-0.5, -1.0, -1.2, -1.2, -1.2]),  # positive advantages: untouched
    ]:
        per_token, _, dual = policy_loss_per_token(logp, old, torch.tensor([adv]), 0.2, c)
        assert per_token[0].tolist() == pytest.approx(want)
        assert per_token[0].tolist() == pytest.approx(
            verl_pg(logp, old, torch.tensor([adv]), 0.2, c)[0].tolist()
        )
        assert dual[0].tolist() == [adv < 0 and c > 0 and w == -adv * c for w in want]
        (grad,) = torch.autograd.grad(per_token.sum(), logp)
        # where the dual clip holds, the token gives no gradient (as where PPO's clip holds)
        clipped = [(adv > 0 and r > 1.2) or (adv < 0 and r < 0.8) for r in ratios[0].tolist()]
        assert [g == 0 for g in grad[0].tolist()] == [d or k for d, k in zip(dual[0].tolist(), clipped)]
    loss, clip_frac = clipped_policy_loss(
        logp, old, torch.tensor([-1.0]), torch.ones(1, 5), 0.2, "token-mean", 3.0
    )
    assert float(loss.detach()) == pytest.approx((0.8 + 1.0 + 2.0 + 3.0 + 3.0) / 5)
    # 0.5 (below 1 - eps); above 1 + eps only the dual clip bounds
    assert float(clip_frac) == pytest.approx(1 / 5)


def test_the_dual_clip_changes_the_update_and_zero_turns_it_off(tiny_path):
    """In a real learner: a token whose ratio ran to ~e^2.5 with a negative advantage stops driving the
    gradient with clip_ratio_c=3 (the default), and drives it with 0 (plain PPO)."""
    norms = {}
    for c in (3.0, 0.0):
        learner = _learner(tiny_path, clip_ratio_c=c)
        stats = learner.train_step(_batch(learner))
        norms[c] = stats["grad_norm"]
        assert (stats["clip_frac/dual"] > 0) == bool(c)
    assert LearnerSettings().clip_ratio_c == 3.0
    assert norms[3.0] < norms[0.0]


def test_the_lr_schedule_counts_train_steps_with_three_ppo_epochs(tiny_path, tmp_path):
    """total_steps counts train steps: with ppo_epochs=3 the linear decay goes 1, 3/4, 1/2, 1/4 over four
    steps (today it counted optimizer updates and reached its floor after the second step), and a
    checkpoint carries the step clock."""
    settings = dict(lr_schedule="linear", total_steps=4, ppo_epochs=3, micro_batch_size=8)
    learner = _learner(tiny_path, **settings)
    seen = []
    for step in range(2):
        stats = learner.train_step(_batch(learner))
        seen.append(stats["lr"])
        assert stats["optim/skipped_steps"] == 0
    assert learner.version == 6  # three optimizer updates per train step
    learner.save(str(tmp_path / "ckpt"))
    resumed = _learner(tiny_path, **settings)
    resumed.load(str(tmp_path / "ckpt"))
    for _ in range(2):
        seen.append(resumed.train_step(_batch(resumed))["lr"])
    assert seen == pytest.approx([1e-2, 7.5e-3, 5e-3, 2.5e-3])
    # every update of a step uses that step's rate
    assert all(g["lr"] == pytest.approx(2.5e-3) for g in resumed.optimizer.param_groups)


def test_non_finite_rewards_are_invalid_samples_not_a_skipped_batch(tiny_path):
    """An inf / -inf reward is left out of its group's statistics like NaN (advantage 0), and counted; the
    rest of the batch trains. (Today the advantages became NaN and the whole update was skipped.)"""
    from rewardhub_trainer.actors import Learner
    from rewardhub_trainer.actors import PromptBatch
    from rewardhub_trainer.actors import Rollout
    from rewardhub_trainer.generation import Completion
    from rewardhub_trainer.learner import group_advantages
    from rewardhub_trainer.reward_client import reward_value

    rewards = torch.tensor([[1.0, math.inf, 0.0, 0.5], [-math.inf, 1.0, 0.0, math.nan]])
    adv = group_advantages(rewards)
    assert bool(torch.isfinite(adv).all())
    assert adv[0, 1] == 0 and adv[1, 0] == 0 and adv[1, 3] == 0
    torch.testing.assert_close(adv[0, [0, 2, 3]], group_advantages(torch.tensor([[1.0, 0.0, 0.5]]))[0])
    huge = group_advantages(torch.tensor([[1e39, 0.0]], dtype=torch.float64))  # as the learner holds rewards
    assert huge[0].tolist() == pytest.approx([1.0, -1.0])
    assert [reward_value(v) for v in (math.inf, -math.inf, "inf", 2)] == pytest.approx(
        [math.nan] * 3 + [2.0], nan_ok=True
    )

    learner = Learner(tiny_path, LearnerSettings(lr=1e-2))
    ref = _learner(tiny_path)
    samples = _batch(ref)[:4]
    groups = [
        [
            Completion(
                prompt_ids=s.prompt_ids,
                response_ids=s.response_ids,
                logprobs=s.old_logprobs,
                text="",
                finished=True,
            )
            for s in samples[:2]
        ],
        [
            Completion(
                prompt_ids=s.prompt_ids,
                response_ids=s.response_ids,
                logprobs=s.old_logprobs,
                text="",
                finished=True,
            )
            for s in samples[2:]
        ],
    ]
    batch = PromptBatch(index=0, prompts=[], dataset_indices=[])
    rollout = Rollout(batch=batch, version=0, groups=groups, gen_s=0.0, rollouter_pid=0,
                      rewards=[[1e39, 0.0], [math.inf, 0.0]])  # 1e39: finite (past float32's range)
    before = {k: v.clone() for k, v in learner.impl.model.state_dict().items()}
    stats = learner.train(rollout)
    assert stats["optim/skipped_steps"] == 0 and stats["version"] == 1.0
    assert any(not torch.equal(v, learner.impl.model.state_dict()[k]) for k, v in before.items())


@pytest.mark.ray
@pytest.mark.timeout(240)
def test_a_run_with_three_ppo_epochs_decays_the_lr_over_its_steps(ray_session, tiny_config, tmp_path):
    """Through the real trainer: ppo_epochs 3, a linear schedule over 3 steps; the config's keys reach the
    learner (clip_ratio_c=0: no token is held by the dual clip)."""
    import json

    from rewardhub_trainer.cli import train

    out = tmp_path / "run"
    summary = train(tiny_config(trainer={"mode": "sync", "total_steps": 3, "ppo_epochs": 3, "lr": 3e-3,
                                         "lr_schedule": "linear", "clip_ratio_c": 0, "kl_coef": 0.1,
                                         "entropy_coeff": 0.01}), output=str(out))
    assert summary["steps"] == 3
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["lr"] for r in rows] == pytest.approx([3e-3, 2e-3, 1e-3])
    assert [r["policy_version"] for r in rows] == [0, 3, 6]  # three updates a step
    assert all(r["clip_frac/dual"] == 0 for r in rows)
    assert rows[-1]["kl"] > 0
    for r in rows:  # the composed loss, as logged
        assert r["loss/total"] == pytest.approx(
            r["loss/policy"] - 0.01 * r["entropy"] + 0.1 * r["kl"], rel=1e-4, abs=1e-6
        )


def _rollout(samples: list[TrainSample], rewards: list[float]):
    from rewardhub_trainer.actors import PromptBatch
    from rewardhub_trainer.actors import Rollout
    from rewardhub_trainer.generation import Completion

    group = [Completion(prompt_ids=s.prompt_ids, response_ids=s.response_ids, logprobs=s.old_logprobs,
                        text="", finished=True) for s in samples]
    return Rollout(batch=PromptBatch(index=0, prompts=[], dataset_indices=[]), version=0, groups=[group],
                   gen_s=0.0, rollouter_pid=0, rewards=[rewards])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kl", [0.0, 0.1])
def test_failed_samples_leave_every_term_and_denominator_of_the_update(tiny_path, mode, kl):
    """Issue 42 §2: one group [1, 0, NaN, NaN] (two failed rewards) updates the weights exactly as the
    group [1, 0] alone, in every aggregation mode, with the KL and the entropy terms on. Same micro-batches,
    same operations: the weights and the loss terms are bitwise equal (tolerance 0). Before, the failed
    samples stayed in the denominators (0.50x the update, 0.39x with token-mean) and carried KL and
    entropy gradient of their own."""
    from rewardhub_trainer.actors import Learner

    kw = {"kl_coef": kl, "entropy_coeff": 0.01, "loss_agg_mode": mode, "micro_batch_size": 2}
    samples = _batch(_learner(tiny_path, **kw))[:4]  # lengths 7, 1, 4, 2: the failed ones hold 6 tokens
    after = {}
    for name, rewards, kept in (("with_failed", [1.0, 0.0, math.nan, math.nan], samples),
                                ("alone", [1.0, 0.0], samples[:2])):
        learner = Learner(tiny_path, LearnerSettings(lr=1e-2, max_grad_norm=1e9, **kw))
        if learner.impl.ref is not None:
            _perturb(learner.impl.model)
        stats = learner.train(_rollout(kept, rewards))
        assert stats["optim/skipped_steps"] == 0
        after[name] = (stats, learner.impl.model.state_dict())
    (stats, weights), (want_stats, want_weights) = after["with_failed"], after["alone"]
    for key in ("loss/policy", "loss/total", "kl", "entropy", "grad_norm", "clip_frac", "ratio/mean"):
        assert stats[key] == want_stats[key], key
    assert (stats["kl"] > 0) == bool(kl)
    for key, value in want_weights.items():
        assert torch.equal(weights[key], value), key
    assert stats["samples/left_out"] == 2 and want_stats["samples/left_out"] == 0
