"""GRPO: group-normalised advantages, PPO's clipped surrogate, optional KL to a frozen reference.

The math is in plain functions (:mod:`rewardhub_trainer.losses`, re-exported here); :class:`GRPOLearner`
applies it to a causal LM. A training batch is a list of groups, each group the ``n`` responses to one prompt.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .config import LearnerSettings
from .logprobs import PLAIN_HEAD_MODELS
from .logprobs import full_logprobs
from .logprobs import response_logprobs
from .logprobs import shared_prompt_logprobs
from .losses import LOG_RATIO_CLAMP
from .losses import SUMMED
from .losses import aggregate_loss
from .losses import clipped_policy_loss
from .losses import group_advantages
from .losses import kl_k3
from .losses import lr_factor
from .losses import masked_mean
from .losses import policy_loss_per_token

__all__ = [
    "GRPOLearner",
    "LearnerSettings",
    "TrainSample",
    "clipped_policy_loss",
    "policy_loss_per_token",
    "full_logprobs",
    "group_advantages",
    "aggregate_loss",
    "kl_k3",
    "lr_factor",
    "masked_mean",
    "PLAIN_HEAD_MODELS",
    "response_logprobs",
    "shared_prompt_logprobs",
    "without_gradient",
]

@dataclass
class TrainSample:
    """One response ready for training. ``valid`` False: its reward failed (or none applied); it takes
    no part in the update (:func:`trained`)."""

    prompt_ids: list[int]
    response_ids: list[int]
    old_logprobs: list[float]
    advantage: float
    valid: bool = True


class GRPOLearner:
    """Holds the policy, the optimizer and (with ``kl_coef > 0``) a frozen reference model."""

    def __init__(
        self, model_path: str, settings: LearnerSettings, *, seed: int = 0, group: Any = None
    ) -> None:
        """``group``: a :class:`rewardhub_trainer.ddp.Group` when this is one of several data-parallel
        ranks."""
        from .models import load_causal_lm

        torch.manual_seed(seed)
        self.settings = settings
        self.group = group
        dtype = getattr(torch, settings.dtype)
        self.device = torch.device(settings.device)
        self.model = load_causal_lm(model_path, dtype, self.device)
        self.model.train()
        if group is not None:
            group.broadcast(self.model)  # every rank starts from rank 0's weights
        self.ref = None
        if settings.kl_coef > 0:
            self.ref = load_causal_lm(model_path, dtype, self.device)
            self.ref.train(False)  # eval mode (transformers' eval() is this, unannotated)
            for p in self.ref.parameters():
                p.requires_grad_(False)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=settings.lr,
                                           betas=(0.9, 0.99), weight_decay=settings.weight_decay)
        self.version = 0  #: optimizer updates applied since the base model
        self.steps = 0  #: train steps (calls of train_step) since the base model: the LR schedule's clock
        self.nonfinite_in_row = 0

    # -- training ----------------------------------------------------------------------------
    def train_step(self, samples: Sequence[TrainSample]) -> dict[str, float]:
        """One train step: one optimizer step per PPO epoch over ``samples``, all at this step's
        learning rate (:func:`lr_factor` of the train steps before this one).

        The policy version counts optimizer updates: it goes up by one per epoch whose loss and
        gradient are finite. An epoch with a non-finite loss or gradient is skipped (no update, the
        optimizer state untouched) and counted in ``optim/skipped_steps``; ``optim/nonfinite_in_row``
        is the number of skipped updates since the last good one (across calls).

        In a group of ranks, ``samples`` is this rank's share of the batch; the loss, gradients and
        metrics are those of the whole batch (every rank returns the same metrics).
        """
        s = self.settings
        stats: dict[str, float] = dict.fromkeys(SUMMED, 0.0)
        stats["grad_norm"] = 0.0
        stats["lr"] = s.lr * lr_factor(
            self.steps, s.lr_schedule, s.lr_warmup_steps, s.total_steps, s.min_lr_ratio
        )
        self.steps += 1
        for group in self.optimizer.param_groups:
            group["lr"] = stats["lr"]
        invalid = len(samples)
        samples = trained(samples)
        invalid -= len(samples)
        ref_cache = self.reference_logprobs(samples)
        skipped = 0
        for _epoch in range(s.ppo_epochs):
            self.optimizer.zero_grad(set_to_none=True)
            last = _epoch == s.ppo_epochs - 1
            finite = self.gradients(samples, stats if last else None, ref_cache)
            if finite:
                # max_grad_norm 0: measured, not clipped (an infinite bound scales by 1)
                norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), s.max_grad_norm or math.inf)
                finite = bool(torch.isfinite(norm))
                if last:
                    stats["grad_norm"] = float(norm)
            if finite:
                self.optimizer.step()
                self.version += 1
                self.nonfinite_in_row = 0
            else:
                skipped += 1
                self.nonfinite_in_row += 1
            self.optimizer.zero_grad(set_to_none=True)
        stats["optim/skipped_steps"] = float(skipped)
        stats["optim/nonfinite_in_row"] = float(self.nonfinite_in_row)
        lengths, count = sum(len(c.response_ids) for c in samples), len(samples)
        idle = sum(without_gradient(s, self.ref is not None, c) for c in samples)
        if self.group is not None:  # the batch's metrics: each rank's share is weighted by the batch's totals
            *summed, lengths, count, idle, invalid = self.group.sum(
                [*(stats[k] for k in SUMMED), lengths, count, idle, invalid]
            )
            stats.update(zip(SUMMED, summed))
        stats["response_len/mean"] = lengths / max(1, count)
        stats["samples/without_gradient"] = float(idle)  #: no backward pass (see gradients)
        stats["samples/left_out"] = float(invalid)  #: invalid samples: in no term of the loss
        return {k: (v if math.isfinite(v) else float("nan")) for k, v in stats.items()}

    def reference_logprobs(self, samples: Sequence[TrainSample]) -> list[torch.Tensor]:
        """The reference model's log-probs of ``samples``, one tensor per micro-batch (none without a
        reference)."""
        s = self.settings
        mbs = max(1, s.micro_batch_size)
        out: list[torch.Tensor] = []
        if self.ref is not None:
            with torch.no_grad():
                for start in range(0, len(samples), mbs):
                    lp, _ = response_logprobs(
                        self.ref, samples[start : start + mbs], s.temperature, autocast=s.autocast
                    )
                    out.append(lp)
        return out

    def gradients(self, samples: Sequence[TrainSample], stats: dict[str, float] | None = None,
                  ref_cache: Sequence[torch.Tensor] = ()) -> bool:
        """Forward and backward over ``samples`` in micro-batches; False when a loss is not finite.

        The gradient accumulated in the parameters' ``.grad`` is that of the whole batch's loss (in a
        group: of every rank's samples, summed over the ranks). With ``stats``, the batch's weighted
        metrics are added to it (this rank's share of them, in a group).

        A sample whose gradient is zero whatever the weights (:func:`without_gradient`: advantage 0,
        no KL, no entropy bonus) gets no backward pass: only a forward one without autograd for the
        metrics (none at all in the epochs that record none). The gradient is the same.
        """
        s = self.settings
        mbs = max(1, s.micro_batch_size)
        samples = trained(samples)
        if self.ref is not None and not ref_cache:
            ref_cache = self.reference_logprobs(samples)  # (with a reference no sample is idle: same chunks)
        total = len(samples)
        tokens = sum(len(c.response_ids) for c in samples)
        if self.group is not None:  # normalise by the batch's totals, so the ranks' losses add up to it
            total, tokens = (int(v) for v in self.group.sum([total, tokens]))
        total, tokens = max(1, total), max(1, tokens)
        finite = True
        idle = [without_gradient(s, self.ref is not None, c) for c in samples]
        live = [c for c, z in zip(samples, idle) if not z]
        chunks = [(live[i:i + mbs], True) for i in range(0, len(live), mbs)]
        if stats is not None:
            rest = [c for c, z in zip(samples, idle) if z]
            chunks += [(rest[i:i + mbs], False) for i in range(0, len(rest), mbs)]
        for k, (chunk, backward) in enumerate(chunks):
            ent: list[torch.Tensor] = []
            # the entropy is a metric only without a bonus: then no autograd graph is built for it
            with torch.set_grad_enabled(backward):
                logp, mask = response_logprobs(
                    self.model,
                    chunk,
                    s.temperature,
                    autocast=s.autocast,
                    entropy=ent,
                    entropy_grad=bool(s.entropy_coeff),
                )
            # a chunk's share of the batch's loss: its tokens (token-mean) or its sequences
            weight = float(mask.sum()) / tokens if s.loss_agg_mode == "token-mean" else len(chunk) / total
            old = _pad_rows([c.old_logprobs for c in chunk], logp.shape[1]).to(self.device)
            adv = torch.tensor([c.advantage for c in chunk], dtype=torch.float32, device=self.device)
            per_token, clipped, dual = policy_loss_per_token(logp, old, adv, s.clip_eps, s.clip_ratio_c)
            # verl's composition: every term aggregated by loss_agg_mode, then
            # policy - entropy_coeff * entropy + kl_coef * kl
            policy = aggregate_loss(per_token, mask, s.loss_agg_mode)
            entropy = aggregate_loss(ent[0] if s.entropy_coeff else ent[0].detach(), mask, s.loss_agg_mode)
            if not s.entropy_coeff:
                ent.clear()  # the metric only: let its graph go
            loss = policy - s.entropy_coeff * entropy
            kl_value = torch.zeros((), device=self.device)
            if self.ref is not None:
                kl_value = aggregate_loss(kl_k3(logp, ref_cache[k]), mask, s.loss_agg_mode)
                loss = loss + s.kl_coef * kl_value
            if stats is not None:
                log_ratio = torch.clamp(logp - old, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
                stats["loss/policy"] += float(policy.detach()) * weight
                stats["loss/total"] += float(loss.detach()) * weight
                stats["kl"] += float(kl_value.detach()) * weight
                stats["entropy"] += float(entropy.detach()) * weight
                stats["clip_frac"] += float(masked_mean(clipped.float(), mask)) * weight
                stats["clip_frac/dual"] += float(masked_mean(dual.float(), mask)) * weight
                stats["ratio/mean"] += float(masked_mean(torch.exp(log_ratio), mask).detach()) * weight
            if not torch.isfinite(loss.detach()):
                finite = False  # nothing of this epoch reaches the weights
                break
            if backward:
                (loss * weight).backward()
        if not live:  # the batch's gradient is zero: the optimizer steps on zeros, as after a backward
            for p in self.model.parameters():
                if p.requires_grad and p.grad is None:
                    p.grad = torch.zeros_like(p)
        if self.group is not None:
            finite = self.group.all_true(finite)  # every rank takes the same path
            if finite:
                self.group.reduce_gradients(list(self.model.parameters()))
        return finite

    # -- weights and checkpoints ---------------------------------------------------------------
    def state_dict(self, copy: bool = True) -> dict[str, torch.Tensor]:
        """Detached CPU copies of the policy's weights (for the rollouters).

        :param copy: ``False``: on a CPU learner, the weights themselves (detached), for a caller that
            is done with them before the next update (an actor method whose result Ray stores as it
            returns: the store's copy is the only one needed).
        :raises FloatingPointError: when a weight is not finite (they are never sent anywhere).
        """
        tied = getattr(self.model.config, "tie_word_embeddings", False)  # the head is the embeddings
        out = {k: v.detach().to("cpu", copy=copy) for k, v in self.model.state_dict().items()
               if not (tied and k.endswith("lm_head.weight"))}
        bad = [k for k, v in out.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]
        if bad:
            raise FloatingPointError(f"non-finite weights in {', '.join(bad[:3])}"
                                     + (f" and {len(bad) - 3} more" if len(bad) > 3 else ""))
        return out

    def save(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)
        self.model.save_pretrained(path, safe_serialization=True)
        torch.save({"optimizer": self.optimizer.state_dict(), "version": self.version, "steps": self.steps,
                    "rng": torch.get_rng_state()}, os.path.join(path, "learner.pt"))

    def load(self, path: str) -> None:
        from safetensors.torch import load_file

        weights = load_file(os.path.join(path, "model.safetensors"), device=str(self.device))
        self.model.load_state_dict(weights, strict=False)
        state = torch.load(os.path.join(path, "learner.pt"), weights_only=False, map_location="cpu")
        self.optimizer.load_state_dict(state["optimizer"])
        if self.group is not None:
            self.group.broadcast(self.model)
        self.version = int(state["version"])
        self.steps = int(state.get("steps", state["version"]))  # a checkpoint from before the step clock
        self.nonfinite_in_row = 0
        torch.set_rng_state(state["rng"])


def trained(samples: Sequence[TrainSample]) -> Sequence[TrainSample]:
    """The samples that take part in the update: the valid ones. An invalid sample (its reward failed)
    is in no term and no denominator of the loss (policy, KL, entropy; tokens and sequences alike), as
    verl's ``agg_loss`` leaves a sample whose mask is all zero: the batch ``[1, 0, NaN, NaN]`` updates
    the weights exactly as ``[1, 0]`` alone."""
    if all(c.valid for c in samples):
        return samples
    return [c for c in samples if c.valid]


def without_gradient(settings: LearnerSettings, has_ref: bool, sample: TrainSample) -> bool:
    """Is ``sample``'s loss gradient zero whatever the weights? With advantage 0, the clipped surrogate
    is ``-min(ratio * 0, clip(ratio) * 0) = 0`` at every token; only a KL or an entropy term would add one."""
    return sample.advantage == 0.0 and not has_ref and not settings.kl_coef and not settings.entropy_coeff


def _pad_rows(rows: Sequence[Sequence[float]], width: int) -> torch.Tensor:
    out = torch.zeros((len(rows), width), dtype=torch.float32)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(list(row), dtype=torch.float32)
    return out
