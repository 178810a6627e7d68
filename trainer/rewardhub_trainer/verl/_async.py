"""verl's fully-async training -> ``trainer.mode: fully_async`` and its settings.

The mapping is the README's ("Fully-async"): verl's fully-async entry point,
``trainer.v1.trainer_mode=separate_async`` or an ``async_training`` section with no entry point sets
``trainer.mode: fully_async``; ``trigger_parameter_sync_step``, ``staleness_threshold``,
``ppo_mini_batch_size x require_batches`` and ``rollout.nnodes x rollout.n_gpus_per_node`` size the
trainer's sync interval, staleness limit, step and rollouters; everything else is dropped with the
reason. Under ``main_ppo`` these keys are not read: dropped.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["fully_async", "map_async"]

_DYNAMIC = (
    "verl's dynamic scheduling of hybrid rollout replicas on the trainer's GPUs; the trainer's rollouters "
    "are fixed (trainer.num_rollouters)"
)
_DROPS = {
    "async_training.use_trainer_do_validate": "evaluation runs on the driver, every trainer.test_freq steps",
    "async_training.use_dynamic_resource_scheduling": _DYNAMIC,
    "async_training.dynamic_schedule_policy": _DYNAMIC,
    "async_training.dynamic_schedule_deactivate_ratio": _DYNAMIC,
    "async_training.dynamic_schedule_enable_rebalance": _DYNAMIC,
    "async_training.concurrent_samples_per_replica": "each rollouter generates one batch at a time",
    "rollout.total_rollout_steps": "verl's fully-async cap on the prompts generated; the run length here is "
                                   "trainer.total_steps (or trainer.total_epochs)",
}
_SYNC_KEYS = ("async_training.trigger_parameter_sync_step", "trainer.v1.separate_async.parameter_sync_step")


def fully_async(entry: dict[str, Any] | None, taken: dict[str, tuple[Any, tuple[str, ...]]]) -> str | None:
    """Why the config is verl's fully-async training (a sentence for the report), or ``None``."""
    if entry is not None and entry.get("mode") == "fully_async":
        if str(entry["module"]).startswith("defaults:"):
            return f"the config is built on verl's fully-async config ({entry['module']})"
        return f"the script runs verl's fully-async entry point {entry['module']} (line {entry['line']})"
    mode = taken.get("trainer.v1.trainer_mode", (None,))[0]
    if str(mode) == "separate_async":
        return "trainer.v1.trainer_mode=separate_async is verl's fully-async trainer"
    if entry is None and any(k.startswith("async_training.") for k in taken):
        return "the config has verl's async_training section (read only by verl's fully-async entry point)"
    return None


def map_async(m: Any, why: str | None, keys: dict[str, Any]) -> None:
    """Map the fully-async keys ``keys`` (dotted -> value) onto ``m`` (a
    :class:`~.mapping.Mapping_`)."""
    mode = keys.pop("trainer.v1.trainer_mode", None)
    if why is None:
        if mode is not None:
            m.dropped(
                "trainer.v1.trainer_mode",
                "sync is the trainer's default mode (trainer.mode)"
                if str(mode) == "sync"
                else f"verl's {mode} mode has no counterpart; the trainer runs sync or fully_async "
                "(trainer.mode)",
                mode,
            )
        for key, value in keys.items():
            m.dropped(key, "read only by verl's fully-async trainer, which this config does not run", value)
        return
    m.sets["trainer.mode"] = ("fully_async", "the entry point")
    m.report.notes.append(f"{why}: trainer.mode=fully_async")
    if mode is not None:
        m.put("trainer.mode", "fully_async", "trainer.v1.trainer_mode")
    sync_key = next((k for k in _SYNC_KEYS if k in keys), None)
    interval = _int(keys.pop(sync_key)) if sync_key else None
    for other in _SYNC_KEYS:
        if other in keys:
            m.put("trainer.sync_interval", keys.pop(other), other)
    if sync_key and interval is not None and interval >= 1:
        m.put("trainer.sync_interval", interval, sync_key)
    elif sync_key is None:
        interval = 4
        m.sets["trainer.sync_interval"] = (4, "verl's default")
        m.report.notes.append("verl's default async_training.trigger_parameter_sync_step=4 is carried over: "
                              "trainer.sync_interval=4")
    else:
        m.put("trainer.sync_interval", interval, sync_key)  # the schema says what is wrong with it
        interval = 1
    threshold = keys.pop("async_training.staleness_threshold", None)
    given = threshold is not None
    try:
        fraction = float(threshold) if given else 0.1
    except (TypeError, ValueError):
        fraction = -1.0
    if fraction >= 0:
        limit = interval - 1 + math.ceil(fraction * interval)
        if given:
            m.put("trainer.staleness_limit", limit, "async_training.staleness_threshold")
        else:
            m.sets["trainer.staleness_limit"] = (limit, "verl's default")
        m.report.notes.append(
            f"{'' if given else 'verl' + chr(39) + 's default '}async_training.staleness_threshold="
            f"{fraction:g} with sync every {interval} step(s): a batch may lag the learner by "
            f"{limit} step(s) (trainer.staleness_limit={limit})"
        )
    else:
        m.dropped("async_training.staleness_threshold", "not a number >= 0", threshold)
    _step_size(m, keys)
    _rollout_gpus(m, keys)
    partial = keys.pop("async_training.partial_rollout", None)
    if partial is not None:
        m.dropped(
            "async_training.partial_rollout",
            "the rollouters load new weights between batches, never in the "
            "middle of a response: a response is generated with one version of the weights"
            + (" (as partial_rollout=false asks)" if str(partial).lower() in ("false", "0") else ""),
            partial,
        )
    for key, value in keys.items():
        m.dropped(
            key, _DROPS.get(key, "a setting of verl's fully-async trainer the trainer does not have"), value
        )


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return int(number) if number.is_integer() else None


def _step_size(m: Any, keys: dict[str, Any]) -> None:
    mini_key, batch_key = "actor_rollout_ref.actor.ppo_mini_batch_size", "data.train_batch_size"
    batches = keys.pop("async_training.require_batches", None)
    mini = keys.pop(mini_key, None)
    batch = keys.pop(batch_key, None)
    count = _int(batches) if batches is not None else 1
    if mini is not None and _int(mini) and count:
        size = _int(mini) * count  # type: ignore[operator]
        m.put("rollout.prompts_per_step", size, mini_key)
        if batches is not None:
            m.put("rollout.prompts_per_step", size, "async_training.require_batches")
        m.report.notes.append(
            f"verl's fully-async trainer trains ppo_mini_batch_size {mini} x require_batches "
            f"{count} prompts a step: rollout.prompts_per_step={size}"
        )
        if batch is not None:
            m.dropped(
                batch_key,
                "verl's fully-async trainer sizes a step by ppo_mini_batch_size x require_batches, "
                "not by the data loader's batch",
                batch,
            )
        return
    if batch is not None:
        m.put("rollout.prompts_per_step", batch, batch_key)
        m.report.notes.append(
            f"{batch_key}={batch}: verl's fully-async trainer would train ppo_mini_batch_size "
            "(verl's default 256) x require_batches prompts a step; here rollout.prompts_per_step="
            f"{batch} (set actor_rollout_ref.actor.ppo_mini_batch_size to size it as verl does)"
        )
    if mini is not None:
        m.dropped(mini_key, "not a whole number > 0", mini)
    if batches is not None:
        m.dropped(
            "async_training.require_batches",
            "verl multiplies it by ppo_mini_batch_size, which is not set",
            batches,
        )


def _rollout_gpus(m: Any, keys: dict[str, Any]) -> None:
    nodes, gpus = keys.pop("rollout.nnodes", None), keys.pop("rollout.n_gpus_per_node", None)
    if gpus is None:
        if nodes is not None:
            m.dropped("rollout.nnodes", "without rollout.n_gpus_per_node it sizes nothing", nodes)
        return
    tp = (m.cfg.get("resources") or {}).get("rollouter", {}).get("num_gpus") or 1
    count = max(1, ((_int(nodes) if nodes is not None else 1) or 1) * (_int(gpus) or 0) // int(tp))
    trainer = m.cfg.get("trainer")
    if isinstance(trainer, dict) and "num_rollouters" in trainer:
        # the resources mapping counted every GPU but the learner's; in verl's fully-async trainer the
        # trainer.* GPUs are the learner's and rollout.* the rollouters'
        trainer.pop("num_rollouters")
        m.report.notes[:] = [n for n in m.report.notes if "(trainer.num_rollouters)" not in n]
    for key, value in (("rollout.nnodes", nodes), ("rollout.n_gpus_per_node", gpus)):
        if value is not None:
            m.put("trainer.num_rollouters", count, key)
    m.report.notes.append(f"verl's fully-async rollouters have {gpus} GPU(s) x {nodes or 1} node(s): "
                          f"trainer.num_rollouters={count} of {tp} GPU(s) each")
