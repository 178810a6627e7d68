"""Which rewards a verl config names, as a rewardhub ``reward:`` section (for :mod:`rewardhub.verl.managers`).

``reward.reward_manager.module.path`` may name a rewardhub YAML; else verl's own reward keys (legacy or
new, migrated or not) are migrated; without a custom function, verl's default scorer is the term.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING
from typing import Any

if TYPE_CHECKING:
    from ..config.schema import RewardConfig

__all__ = ["VERL_DEFAULT_TERM", "raise_per_row", "reward_section"]

#: verl's own scorer, used when the launch script names no custom reward function
VERL_DEFAULT_TERM = {
    "module": "verl.utils.reward_score",
    "function": "default_compute_score",
    "alias": "verl_default",
}


def _legacy_applied(cfg: dict[str, Any]) -> dict[str, Any]:
    """A verl config whose legacy reward keys were not migrated (verl's ``migrate_legacy_reward_impl``
    was not called), with those keys applied by that function's rule: a legacy block with a value
    set replaces its place under ``reward.`` (verl's defaults there are no choice of the user's)."""
    cfg = dict(cfg)
    reward = dict(cfg.get("reward") or {})
    for name in ("custom_reward_function", "sandbox_fusion"):  # the same name under reward.
        block = cfg.pop(name, None)  # gone after verl's migration, set or not
        if isinstance(block, Mapping) and any(v is not None for v in block.values()):
            reward[name] = dict(block)
    rm = cfg.get("reward_model")
    if isinstance(rm, Mapping):
        manager = dict(reward.get("reward_manager") or {})
        if rm.get("reward_manager") is not None:
            manager["name"] = rm["reward_manager"]
        if rm.get("reward_loop_module_path") is not None:
            manager["module"] = {**dict(manager.get("module") or {}), "path": rm["reward_loop_module_path"]}
        if manager:
            reward["reward_manager"] = manager
        if rm.get("reward_kwargs") is not None:
            reward["reward_kwargs"] = rm["reward_kwargs"]
        cfg.pop("reward_model")
    if reward:
        cfg["reward"] = reward
    return cfg


def reward_section(verl_config: Any) -> RewardConfig:
    """The rewardhub ``reward:`` section for a verl config: from the rewardhub YAML named by
    ``reward.reward_manager.module.path``, else migrated from verl's own reward keys."""
    from ..config import load_plan
    from ..config.loader import resolve_or_explain
    from ..config.schema import validate_reward
    from ..errors import UsageError
    from .shim import migrate

    cfg = _legacy_applied(dict(resolve_or_explain(verl_config, "verl config") or {}))
    verl_reward = cfg.get("reward") or {}
    module = ((verl_reward.get("reward_manager") or {}).get("module") or {}).get("path")
    if module and str(module).endswith((".yaml", ".yml")):
        fn = (verl_reward.get("custom_reward_function") or {}).get("path")
        if fn:
            raise UsageError(
                f"reward.custom_reward_function.path={fn!r} and reward.reward_manager.module.path="
                f"{module!r} both name the rewards\nkeep one: put the function in the YAML as a term "
                f"({{path: {fn}, function: ...}}), or drop the module.path"
            )
        return _zero_on_failure(load_plan(str(module)).reward)
    with warnings.catch_warnings():  # a launch script's legacy keys are expected here
        warnings.simplefilter("ignore")
        migrated, _ = migrate(cfg)
    section = dict(migrated.get("reward") or {})
    section.pop("manager", None)
    if not section.get("rewards"):
        term: dict[str, Any] = dict(VERL_DEFAULT_TERM)
        sandbox = verl_reward.get("sandbox_fusion") or {}
        if sandbox.get("url"):
            term["kwargs"] = {"sandbox_fusion_url": sandbox["url"],
                              "memory_limit_mb": sandbox.get("memory_limit_mb") or 1024}
        section["rewards"] = [term]
    kept = {k: v for k, v in section.items() if k in ("rewards", "aggregation", "sandbox", "plugins")}
    return _zero_on_failure(validate_reward(kept))


def _on_failure(section: RewardConfig, old: str | None, new: str) -> RewardConfig:
    """The section with ``on_failure: new`` for each term whose ``on_failure`` is ``old``."""
    return dataclasses.replace(section, rewards=tuple(
        dataclasses.replace(t, on_failure=new) if t.on_failure == old else t for t in section.rewards))


def _zero_on_failure(section: RewardConfig) -> RewardConfig:
    """verl cannot leave a sample out of its batch, and a NaN reward would poison its group's advantages:
    a term that names no ``on_failure`` of its own scores a failed call 0.0 here (flagged in
    ``rewardhub_failed``), where rewardhub's own default is NaN."""
    return _on_failure(section, None, "zero")


def raise_per_row(section: RewardConfig) -> RewardConfig:
    """The section with ``on_failure: raise`` scored as ``drop`` by the Runner: the verl scorer
    raises for the failed row alone (verl's own managers fail only the trajectory that raised), where
    the Runner would raise for every row of the call."""
    return _on_failure(section, "raise", "drop")
