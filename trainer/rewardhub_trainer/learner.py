"""GRPO: group-normalised advantages, PPO's clipped surrogate, optional KL to a frozen reference.

The math is in plain functions (unit-tested without a model); :class:`GRPOLearner` applies it to a
causal LM. A training batch is a list of groups, each group the ``n`` responses to one prompt.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

__all__ = [
    "GRPOLearner",
    "LearnerSettings",
    "TrainSample",
    "clipped_policy_loss",
    "group_advantages",
    "kl_k3",
    "masked_mean",
]


def group_advantages(rewards: torch.Tensor, *, scale: bool = True, eps: float = 1e-6) -> torch.Tensor:
    """Advantages of a ``[groups, n]`` reward matrix: ``(r - mean_group) / (std_group + eps)``.

    NaN rewards (a reward that failed or does not apply) are left out of their group's statistics
    and get advantage 0. A group whose rewards are all equal gets advantages 0 (nothing to learn).
    The standard deviation is the population one (``unbiased=False``).
    """
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be [groups, n], got shape {tuple(rewards.shape)}")
    valid = ~torch.isnan(rewards)
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


def clipped_policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
                        mask: torch.Tensor, clip_eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's clipped surrogate, per token, averaged per sequence then over sequences.

    ``logp``/``old_logp``/``mask`` are ``[batch, tokens]``, ``advantages`` is ``[batch]``.
    Returns ``(loss, clipped_fraction)``; the loss is to be minimised.
    """
    ratio = torch.exp(logp - old_logp)
    adv = advantages.unsqueeze(-1)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * adv
    per_token = -torch.minimum(unclipped, clipped)
    loss = masked_mean(per_token, mask, dim=-1).mean()
    clip_frac = masked_mean((clipped < unclipped).float(), mask)
    return loss, clip_frac.detach()


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token KL(policy || reference) estimator ``exp(ref - logp) - (ref - logp) - 1`` (>= 0)."""
    delta = ref_logp - logp
    return torch.exp(delta) - delta - 1.0


@dataclass
class TrainSample:
    """One response ready for training."""

    prompt_ids: list[int]
    response_ids: list[int]
    old_logprobs: list[float]
    advantage: float


@dataclass(frozen=True)
class LearnerSettings:
    lr: float = 1e-5
    kl_coef: float = 0.0
    clip_eps: float = 0.2
    ppo_epochs: int = 1
    micro_batch_size: int = 8
    max_grad_norm: float = 1.0
    weight_decay: float = 0.0
    temperature: float = 1.0
    dtype: str = "float32"
    autocast: str = "none"  #: none | bfloat16 (fp32 master weights, bf16 matmuls)
    device: str = "cpu"  #: cpu | cuda (resolved by devices.choose in the learner's process)


def response_logprobs(model: Any, samples: Sequence[TrainSample], temperature: float,
                      pad_id: int = 0, autocast: str = "none") -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs of each sample's response tokens, ``[batch, max_response_len]`` plus its mask.

    Sequences are right-padded; only the positions that predict response tokens go through the
    LM head (``logits_to_keep``), which on a 49k vocabulary is a large part of the cost.
    """
    lengths = [len(s.prompt_ids) + len(s.response_ids) for s in samples]
    width = max(lengths)
    rlen = max(len(s.response_ids) for s in samples)
    first = min(len(s.prompt_ids) for s in samples) - 1  # first position whose logits are needed
    keep = width - first
    ids = torch.full((len(samples), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(samples), width), dtype=torch.long)
    for i, s in enumerate(samples):
        seq = s.prompt_ids + s.response_ids
        ids[i, : len(seq)] = torch.tensor(seq)
        attn[i, : len(seq)] = 1
    device = next(model.parameters()).device
    ids, attn = ids.to(device), attn.to(device)
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast == "bfloat16"):
        logits = model(input_ids=ids, attention_mask=attn, logits_to_keep=keep).logits
    logits = logits.float()
    mask = torch.zeros((len(samples), rlen), dtype=torch.float32, device=device)
    rows = []
    for i, s in enumerate(samples):
        p, r = len(s.prompt_ids), len(s.response_ids)
        # the token at position t is predicted by the logits at t - 1; logits[j] is position first + j
        step_logits = logits[i, p - 1 - first : p - 1 - first + r] / temperature
        targets = ids[i, p : p + r]
        lp = torch.log_softmax(step_logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        rows.append(torch.nn.functional.pad(lp, (0, rlen - r)))
        mask[i, :r] = 1.0
    return torch.stack(rows), mask


class GRPOLearner:
    """Holds the policy, the optimizer and (with ``kl_coef > 0``) a frozen reference model."""

    def __init__(self, model_path: str, settings: LearnerSettings, *, seed: int = 0) -> None:
        from transformers import AutoModelForCausalLM

        torch.manual_seed(seed)
        self.settings = settings
        dtype = getattr(torch, settings.dtype)
        self.device = torch.device(settings.device)
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype).to(self.device)
        self.model.train()
        self.ref = None
        if settings.kl_coef > 0:
            self.ref = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype).to(self.device).eval()
            for p in self.ref.parameters():
                p.requires_grad_(False)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=settings.lr,
                                           betas=(0.9, 0.99), weight_decay=settings.weight_decay)
        self.version = 0

    # -- training ----------------------------------------------------------------------------
    def train_step(self, samples: Sequence[TrainSample]) -> dict[str, float]:
        """One optimizer step per PPO epoch over ``samples``; the policy version goes up by one."""
        s = self.settings
        total = len(samples)
        mbs = max(1, s.micro_batch_size)
        stats: dict[str, float] = {"loss/policy": 0.0, "loss/total": 0.0, "kl": 0.0,
                                   "clip_frac": 0.0, "grad_norm": 0.0, "ratio/mean": 0.0}
        ref_cache: list[torch.Tensor] = []
        if self.ref is not None:
            with torch.no_grad():
                for start in range(0, total, mbs):
                    lp, _ = response_logprobs(self.ref, samples[start:start + mbs], s.temperature,
                                              autocast=s.autocast)
                    ref_cache.append(lp)
        for _epoch in range(s.ppo_epochs):
            self.optimizer.zero_grad(set_to_none=True)
            for k, start in enumerate(range(0, total, mbs)):
                chunk = samples[start:start + mbs]
                weight = len(chunk) / total
                logp, mask = response_logprobs(self.model, chunk, s.temperature, autocast=s.autocast)
                old = _pad_rows([c.old_logprobs for c in chunk], logp.shape[1]).to(self.device)
                adv = torch.tensor([c.advantage for c in chunk], dtype=torch.float32, device=self.device)
                policy, clip_frac = clipped_policy_loss(logp, old, adv, mask, s.clip_eps)
                loss = policy
                kl_value = torch.zeros((), device=self.device)
                if self.ref is not None:
                    kl_tok = kl_k3(logp, ref_cache[k])
                    kl_value = masked_mean(kl_tok, mask, dim=-1).mean()
                    loss = policy + s.kl_coef * kl_value
                (loss * weight).backward()
                last = _epoch == s.ppo_epochs - 1
                if last:
                    stats["loss/policy"] += float(policy.detach()) * weight
                    stats["loss/total"] += float(loss.detach()) * weight
                    stats["kl"] += float(kl_value.detach()) * weight
                    stats["clip_frac"] += float(clip_frac) * weight
                    stats["ratio/mean"] += float(masked_mean(torch.exp(logp - old), mask).detach()) * weight
            norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), s.max_grad_norm)
            stats["grad_norm"] = float(norm)
            self.optimizer.step()
        self.version += 1
        stats["response_len/mean"] = sum(len(c.response_ids) for c in samples) / max(1, total)
        return {k: (v if math.isfinite(v) else float("nan")) for k, v in stats.items()}

    # -- weights and checkpoints ---------------------------------------------------------------
    def state_dict(self) -> dict[str, torch.Tensor]:
        """Detached CPU copies of the policy's weights (for the rollouters)."""
        return {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()
                if not k.endswith("lm_head.weight") or not _tied(self.model)}

    def save(self, path: str, extra: Mapping[str, Any] | None = None) -> None:
        os.makedirs(path, exist_ok=True)
        self.model.save_pretrained(path, safe_serialization=True)
        torch.save({"optimizer": self.optimizer.state_dict(), "version": self.version,
                    "rng": torch.get_rng_state()}, os.path.join(path, "learner.pt"))
        if extra is not None:
            with open(os.path.join(path, "learner.json"), "w") as f:
                json.dump(dict(extra), f, sort_keys=True)

    def load(self, path: str) -> None:
        from safetensors.torch import load_file

        weights = load_file(os.path.join(path, "model.safetensors"), device=str(self.device))
        self.model.load_state_dict(weights, strict=False)
        state = torch.load(os.path.join(path, "learner.pt"), weights_only=False, map_location="cpu")
        self.optimizer.load_state_dict(state["optimizer"])
        self.version = int(state["version"])
        torch.set_rng_state(state["rng"])


def _tied(model: Any) -> bool:
    return bool(getattr(model.config, "tie_word_embeddings", False))


def _pad_rows(rows: Sequence[Sequence[float]], width: int) -> torch.Tensor:
    out = torch.zeros((len(rows), width), dtype=torch.float32)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(list(row), dtype=torch.float32)
    return out
