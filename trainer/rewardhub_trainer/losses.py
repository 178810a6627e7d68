"""The GRPO/PPO math as plain functions of tensors (unit-tested without a model): group-normalised
advantages, the masked means and ``loss_agg_mode`` aggregation, the PPO clip with verl's dual clip, the
k3 KL estimator and the LR schedule. :class:`rewardhub_trainer.learner.GRPOLearner` applies them."""

from __future__ import annotations

import math

import torch

__all__ = [
    "KL_CLAMP",
    "LOG_RATIO_CLAMP",
    "SUMMED",
    "group_advantages",
    "masked_mean",
    "aggregate_loss",
    "lr_factor",
    "policy_loss_per_token",
    "clipped_policy_loss",
    "kl_k3",
]

#: log-ratios (policy vs behaviour, policy vs reference) are clamped to this before ``exp``, as verl does:
#: one token with an extreme behaviour log-prob must not make the ratio (and the gradient) infinite
LOG_RATIO_CLAMP = 20.0
#: the per-token k3 KL is clamped to ``[-KL_CLAMP, KL_CLAMP]``, as verl's ``low_var_kl`` does: a token the
#: reference finds far likelier than the policy (log-ratio 15: exp(15) ~ 3.3e6) adds at most 10, and no
#: gradient, so one such token cannot swamp the batch's loss
KL_CLAMP = 10.0


def group_advantages(rewards: torch.Tensor, *, scale: bool = True, eps: float = 1e-6) -> torch.Tensor:
    """Advantages of a ``[groups, n]`` reward matrix: ``(r - mean_group) / (std_group + eps)``.

    Invalid rewards, NaN (a reward that failed or does not apply) or infinite, are left out of their
    group's statistics and get advantage 0. A group whose rewards are all equal gets advantages 0
    (nothing to learn). The standard deviation is the population one (``unbiased=False``).
    """
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be [groups, n], got shape {tuple(rewards.shape)}")
    valid = torch.isfinite(rewards)
    filled = torch.where(valid, rewards, torch.zeros_like(rewards))
    count = valid.sum(dim=1, keepdim=True).clamp(min=1)
    mean = filled.sum(dim=1, keepdim=True) / count
    centred = torch.where(valid, rewards - mean, torch.zeros_like(rewards))
    if scale:
        std = (centred.pow(2).sum(dim=1, keepdim=True) / count).sqrt()
        centred = centred / (std + eps)
    return centred


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of ``values`` where ``mask`` is 1 (over ``dim``, or all of them)."""
    mask = mask.to(values.dtype)
    if dim is None:
        return (values * mask).sum() / mask.sum().clamp(min=1)
    return (values * mask).sum(dim) / mask.sum(dim).clamp(min=1)


#: the metrics that are a weighted sum over the batch's micro-batches (summed over the ranks, too)
SUMMED = ("loss/policy", "loss/total", "kl", "clip_frac", "clip_frac/dual", "ratio/mean", "entropy")


def aggregate_loss(
    per_token: torch.Tensor, mask: torch.Tensor, mode: str = "seq-mean-token-mean"
) -> torch.Tensor:
    """A ``[batch, tokens]`` loss as one number, the way verl's ``loss_agg_mode`` names it: the mean over
    every token (``token-mean``), or per sequence the mean / sum of its tokens, then the mean of those."""
    if mode == "token-mean":
        return masked_mean(per_token, mask)
    if mode == "seq-mean-token-sum":
        return (per_token * mask.to(per_token.dtype)).sum(-1).mean()
    return masked_mean(per_token, mask, dim=-1).mean()


def lr_factor(step: int, lr_schedule: str = "constant", warmup_steps: int = 0, total_steps: int = 0,
              min_lr_ratio: float = 0.0) -> float:
    """The learning rate of train step ``step`` (0-based) as a fraction of the peak: a linear warm-up
    over ``warmup_steps``, then constant, or a linear / cosine decay to ``min_lr_ratio`` at ``total_steps``.

    A train step is one batch (``trainer.total_steps`` counts them); its ``ppo_epochs`` optimizer
    updates all use its learning rate, as verl steps its scheduler once per batch."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if lr_schedule == "constant" or total_steps <= warmup_steps:
        return 1.0
    frac = min(1.0, (step - warmup_steps) / (total_steps - warmup_steps))
    decay = 1.0 - frac if lr_schedule == "linear" else 0.5 * (1.0 + math.cos(math.pi * frac))
    return min_lr_ratio + (1.0 - min_lr_ratio) * decay


def policy_loss_per_token(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    clip_eps: float,
    clip_ratio_c: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """PPO's clipped surrogate per token, with verl's dual clip: ``(loss, clipped, dual_clipped)``.

    ``logp``/``old_logp`` are ``[batch, tokens]``, ``advantages`` is ``[batch]``. Per token the loss is
    ``max(-A * r, -A * clip(r, 1 - eps, 1 + eps))`` (``r`` the policy/behaviour ratio). With
    ``clip_ratio_c > 1`` (dual-clip PPO, verl's ``clip_ratio_c``) a token of negative advantage loses
    at most ``clip_ratio_c * |A|``: ``min(that, -A * clip_ratio_c)``, so a token whose ratio has run far
    above 1 (a stale or extreme behaviour log-prob) stops driving the update (its gradient is 0 there).
    ``clip_ratio_c = 0``: no dual clip. ``clipped`` / ``dual_clipped`` mark the tokens where each clip
    is active (as verl's ``pg_clipfrac`` and ``pg_clipfrac_lower`` count them).
    """
    ratio = torch.exp(torch.clamp(logp - old_logp, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    adv = advantages.unsqueeze(-1)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * adv
    per_token = -torch.minimum(unclipped, clipped)
    dual = torch.zeros_like(per_token, dtype=torch.bool)
    if clip_ratio_c:
        bound = (-adv * clip_ratio_c).expand_as(per_token)
        dual = (adv < 0) & (per_token > bound)
        per_token = torch.where(dual, bound, per_token)
    return per_token, (clipped < unclipped).detach(), dual.detach()


def clipped_policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
                        mask: torch.Tensor, clip_eps: float, agg: str = "seq-mean-token-mean",
                        clip_ratio_c: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`policy_loss_per_token` aggregated by ``agg`` (:func:`aggregate_loss`; by default averaged per
    sequence then over sequences): ``(loss, clipped_fraction)``; the loss is to be minimised."""
    per_token, clipped, _ = policy_loss_per_token(logp, old_logp, advantages, clip_eps, clip_ratio_c)
    return aggregate_loss(per_token, mask, agg), masked_mean(clipped.float(), mask)


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token KL(policy || reference) estimator ``exp(ref - logp) - (ref - logp) - 1`` (>= 0), as
    verl's ``low_var_kl``: the log-ratio clamped to ``LOG_RATIO_CLAMP`` before ``exp``, the estimate to
    ``[-KL_CLAMP, KL_CLAMP]`` (where it is clamped, its gradient is 0)."""
    delta = torch.clamp(ref_logp - logp, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return torch.clamp(torch.exp(delta) - delta - 1.0, -KL_CLAMP, KL_CLAMP)
