"""The verl keys that :class:`~.mapping.Mapping_` decides with the whole config: the rollout engine,
evaluation sampling, KL, the advantage estimator, warm-up, checkpoints saved and kept, LoRA, the policy loss
and PPO mini-batches (the table's ``(kind,)`` rules of :data:`~.rules.KEY_RULES`)."""

from __future__ import annotations

import math
from typing import Any

from rewardhub.verl.keys import ENGINES
from rewardhub.verl.shim import truthy

__all__ = ["decide"]


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def decide(m: Any, kind: str, key: str, value: Any) -> None:
    if kind == "engine":
        engine = ENGINES.get(str(value).lower())
        if engine:
            m.put("rollout.engine", engine, key)
        else:
            m.dropped(key, f"the trainer generates with transformers or vllm (rollout.engine), not {value}",
                      value)
    elif kind == "val_temperature":
        sample = m.given("actor_rollout_ref.rollout.val_kwargs.do_sample")
        if key.endswith("do_sample"):
            if sample is not None and not truthy(sample):
                m.put("rollout.val_temperature", 0.0, key)  # greedy
            else:
                m.dropped(key, "sampling is on whenever rollout.val_temperature > 0", value)
        elif sample is not None and not truthy(sample):
            m.dropped(key, "do_sample=false: evaluation is greedy", value)
        else:
            m.put("rollout.val_temperature", value, key)
    elif kind == "kl":
        _kl(m, key, value)
    elif kind == "adv":
        if str(value).lower() == "grpo":
            m.dropped(key, "the trainer is GRPO (group-normalised advantages), as asked", value)
        else:
            m.dropped(key, f"the trainer computes GRPO advantages only; {value} is not implemented", value)
            m.report.notes.append(f"{key}={value!r}: this run uses GRPO advantages instead")
    elif kind == "epochs":  # only with total_training_steps (else left in place)
        m.dropped(key, "trainer.total_training_steps is set and wins, as in verl", value)
    elif kind == "warmup":
        _warmup(m, key, value)
    elif kind == "save":
        every = int(value) if str(value).lstrip("-").isdigit() else value
        if isinstance(every, int) and every <= 0:
            m.put("trainer.checkpoint_every", 0, key)
            m.report.notes.append(f"{key}={value}: the trainer still saves one checkpoint at the end")
        else:
            m.put("trainer.checkpoint_every", every, key)
    elif kind == "keep":
        n = _int(value)
        if n is not None and n > 0:
            m.put("trainer.checkpoint_keep", n, key)
        else:
            m.dropped(key, "verl keeps every checkpoint when it is unset or not positive; the trainer keeps "
                           "the newest trainer.checkpoint_keep (3 unless set) and deletes older ones", value)
    elif kind == "lora":
        rank = _int(value)
        if rank == 0:
            m.dropped(key, "0 is no LoRA: every weight is trained, as the trainer always does", value)
        else:
            m.dropped(key, "no LoRA: the trainer trains every weight of the model (full fine-tuning), not "
                           "low-rank adapters", value)
            m.report.notes.append(f"{key}={value!r}: this run trains every weight, not LoRA adapters (more "
                                  "memory; lower trainer.lr than for LoRA)")
    elif kind == "loss_mode":
        if str(value).lower() == "vanilla":
            m.dropped(key, "vanilla is the trainer's loss: PPO-clip (with dual-clip, trainer.clip_ratio_c)",
                      value)
        else:
            m.dropped(key, f"the trainer's loss is PPO-clip (verl's vanilla); {value} is not implemented",
                      value)
            m.report.notes.append(f"{key}={value!r}: this run uses the PPO-clip loss instead")
    elif kind == "mini":
        _mini(m, key, value)
    else:  # pragma: no cover - every kind of the table is handled above
        raise AssertionError(kind)

def _kl(m: Any, key: str, value: Any) -> None:
    use_loss = truthy(m.given("actor_rollout_ref.actor.use_kl_loss"))  # unset (None): false
    in_reward = truthy(m.given("algorithm.use_kl_in_reward"))
    if key.endswith("use_kl_loss") or key.endswith("use_kl_in_reward"):
        m.dropped(key, "the KL term is on when trainer.kl_coef > 0 (a loss term, never in the reward)", value)
    elif key.endswith("kl_loss_coef"):
        if use_loss:
            m.put("trainer.kl_coef", value, key)
        else:
            m.dropped(key, "use_kl_loss is not true", value)
    else:  # algorithm.kl_ctrl.kl_coef: verl uses it only as a KL penalty in the reward
        if in_reward and not use_loss:
            m.put("trainer.kl_coef", value, key)
            m.report.notes.append(f"{key}: the trainer applies the KL term in the loss, not in the reward")
        else:
            m.dropped(key, "verl applies it only with algorithm.use_kl_in_reward=true, which is not set"
                      + ("; the KL loss coefficient is used" if use_loss else ""), value)

def _warmup(m: Any, key: str, value: Any) -> None:
    """verl: lr_warmup_steps < 0 (its default) means lr_warmup_steps_ratio x the run's steps."""
    steps = _int(m.given("actor_rollout_ref.actor.optim.lr_warmup_steps"))
    if key.endswith("lr_warmup_steps"):
        if steps is not None and steps >= 0:
            m.put("trainer.lr_warmup_steps", steps, key)
        else:
            m.dropped(key, "negative: verl then takes lr_warmup_steps_ratio of the run's steps", value)
        return
    if steps is not None and steps >= 0:
        m.dropped(key, "lr_warmup_steps is set, and wins, as in verl", value)
        return
    total = _int(m.given("trainer.total_training_steps"))
    try:
        ratio = float(value)
    except (TypeError, ValueError):
        ratio = -1.0
    if total is not None and total > 0 and 0 <= ratio <= 1:
        m.put("trainer.lr_warmup_steps", int(ratio * total), key)
        m.report.notes.append(f"{key}={value}: {int(ratio * total)} warm-up steps of "
                              f"trainer.total_training_steps={total}, as verl computes them")
    elif ratio == 0:
        m.dropped(key, "0: no warm-up, as here unless trainer.lr_warmup_steps is set", value)
    else:
        m.dropped(key, "verl takes this fraction of the run's steps, which are not known here without "
                       "trainer.total_training_steps; give trainer.lr_warmup_steps", value)

def _mini(m: Any, key: str, value: Any) -> None:
    mini = _int(value)
    batch = _int(m.given("data.train_batch_size"))
    if mini is not None and batch is not None and mini > 0 and batch > 0:
        verl_steps = max(1, math.ceil(batch / mini))
        how = (f"verl makes {verl_steps} optimizer step(s) per batch and PPO epoch here (train_batch_size "
               f"{batch} / ppo_mini_batch_size {mini}); the trainer makes 1")
    else:
        how = (
            "verl makes train_batch_size / ppo_mini_batch_size optimizer steps per batch and PPO epoch; the "
            "trainer makes 1 (the whole batch is the mini-batch)"
        )
    m.dropped(key, how, value)
    if mini is not None and batch is not None and 0 < mini < batch:
        m.report.notes.append(f"{key}={value}: {how}; raise trainer.ppo_epochs for more updates per batch")
