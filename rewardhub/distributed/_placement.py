"""Where reward-model terms run: a Ray pool of their own, sized from ``reward.reward_model`` (verl's keys)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from ..config.schema import RewardConfig
from ..config.schema import RewardModelConfig
from ..config.schema import TermConfig
from ..execution import Term

__all__ = ["on_reward_model_pool", "place_reward_models", "reward_model_pool", "reward_model_terms",
           "split_reward_models"]


def on_reward_model_pool(rm: RewardModelConfig, capabilities: Sequence[str], executor: str | None) -> bool:
    """Whether a term runs on the reward-model pool: ``reward.reward_model.enable`` is set, its
    reward has the ``reward_model`` capability and the term names no executor but ``ray``."""
    return rm.enable and "reward_model" in capabilities and executor in (None, "ray")


def reward_model_pool(rm: RewardModelConfig, workers: Mapping[str, Any]) -> dict[str, Any]:
    """Ray pool options for reward-model terms, from ``reward.reward_model`` (verl's ``reward_model.*``).

    ``num_workers`` actors on the pool named ``rm.pool``; each gets an equal share of
    ``n_gpus_per_node * nnodes`` GPUs (none on a CPU machine). The Ray address and the plugin
    sources are those of ``workers`` (``reward.workers``' Ray options).
    """
    num_workers = max(1, rm.num_workers or 1)
    gpus = float(rm.n_gpus_per_node or 0) * max(1, rm.nnodes or 1)
    opts: dict[str, Any] = {"pool": rm.pool or "reward_model", "num_workers": num_workers,
                            "num_cpus": 1.0, "num_gpus": gpus / num_workers, "autoscale": rm.autoscale}
    for key in ("address", "plugins"):
        if workers.get(key) is not None:
            opts[key] = workers[key]
    return opts


def place_reward_models(reward_cfg: RewardConfig, terms: Sequence[Term], workers: Mapping[str, Any]
                        ) -> dict[str, dict[str, Any]]:
    """Move the reward-model terms of ``reward_cfg`` to their Ray pool (``executor: ray``, ``pool``).

    :param terms: the config's resolved terms, in its order (changed in place).
    :param workers: the Ray options of ``reward.workers`` (address and plugin sources are shared).
    :returns: pool name -> Ray pool options, for the pools placed here (none unless
        ``reward.reward_model.enable``).
    """
    rm = reward_cfg.reward_model
    if not rm.enable:
        return {}
    pool = reward_model_pool(rm, workers)
    pools: dict[str, dict[str, Any]] = {}
    for term, term_cfg in zip(terms, reward_cfg.rewards):
        if on_reward_model_pool(rm, term.spec.capabilities, term_cfg.executor):
            term.policy = term.policy.merged(executor="ray")
            term.pool = pool["pool"]
            pools[term.pool] = pool
    return pools


def reward_model_terms(cfg: RewardConfig, registry: Any) -> list[int]:
    """Indices of the terms that go to the reward-model pool (none unless ``reward_model.enable``)."""
    rm = cfg.reward_model
    if not rm.enable:
        return []
    # capabilities come with the reward's own declaration: its module is imported (as the runner does)
    return [
        i
        for i, term in enumerate(cfg.rewards)
        if on_reward_model_pool(
            rm, registry.load_full(registry.term_spec(term))[0].capabilities, term.executor
        )
    ]


def split_reward_models(cfg: RewardConfig, rm_idx: Sequence[int]
                        ) -> tuple[RewardConfig, tuple[TermConfig, ...], dict[str, Any]]:
    """The reward-model pool's share of a worker config: (its config, the other terms, its Ray options)."""
    opts = reward_model_pool(cfg.reward_model, {"address": cfg.workers.address})
    workers = dataclasses.replace(
        cfg.workers, **{k: opts[k] for k in ("pool", "num_workers", "num_cpus", "num_gpus", "autoscale")}
    )
    rm_cfg = dataclasses.replace(cfg, rewards=tuple(cfg.rewards[i] for i in rm_idx), workers=workers)
    return rm_cfg, tuple(t for i, t in enumerate(cfg.rewards) if i not in rm_idx), opts
