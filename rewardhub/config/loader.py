"""The one config loader every entry point uses: read, override, migrate, validate, resolve paths."""

from __future__ import annotations

import copy
import os
import warnings
from collections.abc import Iterable
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import Any

from ..errors import RewardhubDeprecationWarning
from ..errors import UsageError

__all__ = ["MigrationReport", "load_config", "load_config_with_report", "read_config_file", "LOAD_CALLS"]

#: how many times this process loaded a config (the entry-point test checks it goes up)
LOAD_CALLS = [0]


@dataclass
class MigrationReport:
    """What the legacy shim did: ``moved`` ``{"from", "to"}`` pairs and ``dropped`` ``{"key", "reason"}``."""

    moved: list[dict[str, str]] = field(default_factory=list)
    dropped: list[dict[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _basic_migrate(config: Mapping[str, Any]) -> tuple[dict[str, Any], MigrationReport]:
    """The legacy keys every verl user has: ``custom_reward_function.{path,name,reward_kwargs}``."""
    cfg = copy.deepcopy(dict(config))
    report = MigrationReport()
    for prefix, holder in (("custom_reward_function", cfg), ("reward.custom_reward_function", cfg.get("reward"))):
        if not isinstance(holder, dict) or not isinstance(holder.get("custom_reward_function"), Mapping):
            continue
        old = dict(holder.pop("custom_reward_function"))
        path = old.pop("path", None)
        name = old.pop("name", None) or "compute_score"
        kwargs = old.pop("reward_kwargs", None) or {}
        reward = cfg.setdefault("reward", {})
        if path:
            term = {"path": path, "function": name, "kwargs": dict(kwargs)}
            terms = reward.setdefault("rewards", [])
            if term not in terms:
                terms.append(term)
            for key in ("path", "name", "reward_kwargs"):
                report.moved.append({"from": f"{prefix}.{key}", "to": "reward.rewards[].path/function/kwargs"})
            warnings.warn(f"{prefix} is deprecated: it is now a reward term (reward.rewards: "
                          f"[{{path: {path}, function: {name}}}])", RewardhubDeprecationWarning, stacklevel=3)
        for key, value in old.items():
            report.dropped.append({"key": f"{prefix}.{key}", "reason": f"no meaning here (value {value!r})"})
    return cfg, report


def _migrate(config: Mapping[str, Any]) -> tuple[dict[str, Any], Any]:
    try:
        from .shim import migrate
    except ImportError:
        return _basic_migrate(config)
    return migrate(config)


def read_config_file(path: str) -> dict[str, Any]:
    """Read a YAML config (or a shell launch script's overrides) into a plain dict."""
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise UsageError(f"cannot read config {path!r}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise UsageError(f"config {path!r} is not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError(f"config {path!r} must be a mapping at the top level, not {type(data).__name__}")
    return data


def _resolve_paths(reward: dict[str, Any], file_dir: str | None, notes: list[str]) -> None:
    for i, term in enumerate(reward.get("rewards") or []):
        p = term.get("path") if isinstance(term, dict) else None
        if not p or os.path.isabs(os.path.expanduser(str(p))):
            if p:
                term["path"] = os.path.expanduser(str(p))
            continue
        p = os.path.expanduser(str(p))
        from_file = os.path.abspath(os.path.join(file_dir, p)) if file_dir else None
        from_cwd = os.path.abspath(p)
        chosen = from_file if from_file and (os.path.exists(from_file) or not os.path.exists(from_cwd)) else from_cwd
        if from_file and from_file != from_cwd and os.path.exists(from_file) and os.path.exists(from_cwd):
            notes.append(f"reward.rewards[{i}].path {p!r} exists relative to both the config file and the "
                         f"working directory; using the config file's: {from_file}")
        term["path"] = chosen


def load_config_with_report(path: str | None = None, overrides: Iterable[str] = (), *,
                            base_dir: str | None = None) -> tuple[Any, Any]:
    """Like :func:`load_config`, and also the migration report."""
    from omegaconf import OmegaConf

    from .overrides import apply_overrides
    from .schema import validate_reward

    LOAD_CALLS[0] += 1
    raw: dict[str, Any] = read_config_file(path) if path else {}
    file_dir = base_dir or (os.path.dirname(os.path.abspath(path)) if path else None)
    overrides = list(overrides)
    if overrides:
        # paths typed on the command line are relative to the working directory
        raw = apply_overrides(raw, overrides)
    cfg, report = _migrate(raw)
    reward = dict(cfg.get("reward") or {})
    notes: list[str] = getattr(report, "notes", [])
    _resolve_paths(reward, file_dir if path else None, notes)
    validated = validate_reward(reward)
    rest = {k: v for k, v in cfg.items() if k != "reward"}
    whole = OmegaConf.create(rest)
    whole.reward = validated
    return whole, report


def load_config(path: str | None = None, overrides: Iterable[str] = (), *, base_dir: str | None = None) -> Any:
    """Read a config the one way every entry point does.

    Applies ``KEY=VALUE`` overrides (Hydra's ``+``/``++`` accepted), migrates legacy reward keys
    (one :class:`~rewardhub.RewardhubDeprecationWarning` per key), validates ``reward:``, and makes
    reward file paths absolute (relative to the config file when it came from one, else to the
    working directory).

    :returns: the whole config as a ``DictConfig``; sections other than ``reward`` are untouched.
    :raises UsageError: naming the key, the bad value and the fix.
    """
    return load_config_with_report(path, overrides, base_dir=base_dir)[0]
