"""Finding verl's legacy reward keys in a config: every leaf under a legacy node, and the rule for it."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..config.overrides import leaves as dotted_leaves
from ..errors import UsageError
from ._legacy_rules import RM_FIELDS
from ._legacy_rules import RULES
from .keys import is_verl_key
from .keys import matches

__all__ = ["Leaf", "is_legacy_key", "legacy_keys", "legacy_leaves", "plain_dict", "rule_of"]


@dataclass
class Leaf:
    key: str  #: the full dotted legacy key, e.g. "reward_model.reward_kwargs.max_resp_len"
    ns: str  #: the rule namespace
    rel: str  #: the key relative to the namespace's node
    value: Any


def plain_dict(config: Any) -> dict[str, Any]:
    if type(config).__module__.startswith("omegaconf"):
        from omegaconf import OmegaConf

        config = OmegaConf.to_container(config, resolve=False)
    if config is None:
        return {}
    if not isinstance(config, Mapping):
        raise UsageError(f"a config must be a mapping at the top level, not {type(config).__name__}")
    return copy.deepcopy(dict(config))


def legacy_leaves(cfg: dict[str, Any]) -> list[Leaf]:
    """Every legacy key of ``cfg``, in a stable order; the nodes holding them are removed from ``cfg``."""
    leaves: list[Leaf] = []

    def take(holder: dict[str, Any], ns: str, prefix: str) -> None:  # the node ``ns`` at ``prefix``
        if ns not in holder:
            return
        node = holder.pop(ns)
        if ns in ("reward_kwargs", "sandbox_fusion") and not isinstance(node, Mapping):
            leaves.append(Leaf(prefix, "drop", "", node))
            return
        if not isinstance(node, Mapping):
            if ns == "reward_manager" and isinstance(node, str):
                # verl <= 0.5: `reward_manager: naive` at the top level
                leaves.append(Leaf(prefix, "reward_manager", "name", node))
            else:
                leaves.append(Leaf(prefix, "drop", "", node))
            return
        for rel, value in dotted_leaves(node, ""):
            leaves.append(Leaf(f"{prefix}.{rel}" if rel else prefix, ns, rel, value))

    for ns in ("custom_reward_function", "reward_manager", "reward_model", "sandbox_fusion"):
        take(cfg, ns, ns)
    reward = cfg.get("reward")
    if isinstance(reward, Mapping):
        reward = cfg["reward"] = dict(reward)
        for ns in ("custom_reward_function", "reward_manager", "reward_kwargs", "sandbox_fusion"):
            take(reward, ns, f"reward.{ns}")
        if "num_workers" in reward:
            leaves.append(Leaf("reward.num_workers", "num_workers", "", reward.pop("num_workers")))
        rm = reward.get("reward_model")
        if isinstance(rm, Mapping):
            rm = reward["reward_model"] = dict(rm)
            for k in [k for k in rm if k not in RM_FIELDS]:
                node = rm.pop(k)
                for rel, value in dotted_leaves(node, str(k)):
                    leaves.append(Leaf(f"reward.reward_model.{rel}", "reward_model", rel, value))
    return leaves


def is_legacy_key(key: str) -> bool:
    """Whether a dotted key (as in an override) is one the shim migrates: one :func:`legacy_leaves` finds."""
    node: Any = None
    for part in reversed(key.split(".")):
        node = {part: node}
    return bool(legacy_leaves(node))


def legacy_keys(config: Any) -> list[str]:
    """The dotted legacy keys in ``config`` (empty when it needs no migration)."""
    return [leaf.key for leaf in legacy_leaves(plain_dict(config))]


def rule_of(leaf: Leaf) -> tuple[str, ...]:
    if leaf.ns == "drop":
        return ("drop", "not a mapping of settings")
    if leaf.ns == "num_workers":
        return ("move", "reward.workers.num_workers")
    if leaf.rel.split(".")[-1] == "_target_":
        return ("drop", "a verl dataclass target; no meaning here")
    for pattern, action in RULES[leaf.ns]:
        if matches(pattern, leaf.rel):
            if pattern == "*" and action[0] == "drop" and not (
                    is_verl_key(leaf.key) or is_verl_key(f"{leaf.ns}.{leaf.rel}")):
                return ("unknown",)  # a misspelling (reward_model.reward_manger), not a setting to drop
            return action
    raise AssertionError(leaf)  # every namespace ends with "*"
