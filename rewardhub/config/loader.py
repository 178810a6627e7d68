"""The one config loader every entry point uses: read, override, migrate, validate, resolve paths."""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable
from collections.abc import Mapping
from typing import Any

from ..errors import UsageError
from .shim import MigrationReport

__all__ = ["LOAD_CALLS", "MigrationReport", "config_file_kind", "load_config", "load_config_with_report",
           "read_and_migrate", "read_config_file", "script_overrides"]

#: how many times this process loaded a config (the entry-point test checks it goes up)
LOAD_CALLS = [0]


def _migrate(config: Mapping[str, Any]) -> tuple[dict[str, Any], MigrationReport]:
    from .shim import migrate
    from .verl_resources import migrate_resources

    return migrate_resources(*migrate(config))


SHELL_SUFFIXES = (".sh", ".bash", ".overrides", ".txt")
YAML_SUFFIXES = (".yaml", ".yml", ".json")


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        raise UsageError(f"cannot read config {path!r}: {exc.strerror}") from None


def config_file_kind(path: str, text: str) -> str:
    """``"yaml"`` or ``"shell"`` (a launch script, or a file of overrides one per line)."""
    lower = path.lower()
    if lower.endswith(YAML_SUFFIXES):
        return "yaml"
    if lower.endswith(SHELL_SUFFIXES) or text.startswith("#!"):
        return "shell"
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return "shell"
    return "yaml" if isinstance(data, dict) or data is None else "shell"


def script_overrides(text: str) -> list[Any]:
    """The override words of a shell script (or overrides file), as shell words with their spans."""
    from .overrides import is_override_word
    from .overrides import shell_words

    return [w for w in shell_words(text) if is_override_word(w.text)]


def read_config_file(path: str) -> dict[str, Any]:
    """Read a YAML config, or a shell launch script's / overrides file's ``KEY=VALUE`` words, into a dict."""
    text = _read_text(path)
    if config_file_kind(path, text) == "shell":
        from .overrides import apply_overrides

        words = script_overrides(text)
        if not words:
            raise UsageError(f"config {path!r} is neither YAML nor a script with KEY=VALUE overrides\n"
                             "pass a YAML file, or a launch script whose command has dotted overrides")
        return apply_overrides({}, [w.text for w in words])
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise UsageError(f"config {path!r} is not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError(f"config {path!r} must be a mapping at the top level, not {type(data).__name__}")
    return data


def read_and_migrate(path: str | None = None, overrides: Iterable[str] = ()) -> tuple[dict[str, Any], Any]:
    """Read a config file (optional), apply overrides, migrate legacy keys: the raw migrated dict.

    Every entry point reaches this, through :func:`load_config` or (``rewardhub migrate``) directly.
    """
    from .overrides import apply_overrides

    LOAD_CALLS[0] += 1
    raw: dict[str, Any] = read_config_file(path) if path else {}
    overrides = list(overrides)
    if overrides:
        raw = apply_overrides(raw, overrides)
    return _migrate(raw)


def _resolve_paths(reward: dict[str, Any], file_dir: str | None, from_file: set[str], notes: list[str]) -> None:
    """Make term paths absolute: a path written in the config file is relative to the file's folder,
    one typed as an override is relative to the working directory; say so when both exist."""
    for i, term in enumerate(reward.get("rewards") or []):
        p = term.get("path") if isinstance(term, dict) else None
        if not p or str(p).startswith("${"):
            continue  # an interpolation resolves later
        p = os.path.expanduser(str(p))
        if os.path.isabs(p):
            term["path"] = p
            continue
        in_file = os.path.abspath(os.path.join(file_dir, p)) if file_dir else None
        in_cwd = os.path.abspath(p)
        use_file = in_file is not None and str(term["path"]) in from_file
        chosen = in_file if use_file else in_cwd
        other = in_cwd if use_file else in_file
        if other and other != chosen and os.path.exists(in_cwd) and os.path.exists(in_file or ""):
            origin = "the config file" if use_file else "the command line"
            notes.append(f"reward.rewards[{i}].path {p!r} exists relative to both the config file and the working "
                         f"directory; it came from {origin}, so it is {chosen}")
        term["path"] = chosen


def _file_paths(path: str) -> set[str]:
    """The term paths the config file itself writes (after migration), as written."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg, _ = _migrate(read_config_file(path))
    return {str(t["path"]) for t in (cfg.get("reward") or {}).get("rewards") or []
            if isinstance(t, Mapping) and t.get("path")}


def load_config_with_report(path: str | None = None, overrides: Iterable[str] = (), *,
                            base_dir: str | None = None) -> tuple[Any, Any]:
    """Like :func:`load_config`, and also the migration report."""
    from omegaconf import OmegaConf

    from .schema import validate_reward

    overrides = list(overrides)
    file_dir = base_dir or (os.path.dirname(os.path.abspath(path)) if path else None)
    cfg, report = read_and_migrate(path, overrides)
    reward = dict(cfg.get("reward") or {})
    notes: list[str] = report.notes
    if path and config_file_kind(path, _read_text(path)) == "shell":
        from_file = set()  # a launch script's overrides are typed as on the command line: cwd-relative
    elif path and overrides:
        from_file = _file_paths(path)
    elif path or base_dir:
        from_file = {str(t["path"]) for t in reward.get("rewards") or [] if isinstance(t, Mapping) and t.get("path")}
    else:
        from_file = set()
    _resolve_paths(reward, file_dir, from_file, notes)
    validated = validate_reward(reward)
    rest = {k: v for k, v in cfg.items() if k != "reward"}
    whole = OmegaConf.create(rest)
    whole.reward = validated
    return whole, report


def load_config(path: str | None = None, overrides: Iterable[str] = (), *, base_dir: str | None = None) -> Any:
    """Read a config the one way every entry point does.

    Applies ``KEY=VALUE`` overrides (Hydra's ``+``/``++`` accepted), migrates legacy reward keys
    (one :class:`~rewardhub.RewardhubDeprecationWarning` per key), validates ``reward:``, and makes
    reward file paths absolute (relative to the YAML config file when written there; relative to the
    working directory when typed as an override, or in a launch script).

    :returns: the whole config as a ``DictConfig``; sections other than ``reward`` are untouched.
    :raises UsageError: naming the key, the bad value and the fix.
    """
    return load_config_with_report(path, overrides, base_dir=base_dir)[0]
