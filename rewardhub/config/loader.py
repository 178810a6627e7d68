"""The one config loader every entry point uses: read, override, migrate, validate, resolve paths."""

from __future__ import annotations

import copy
import functools
import os
from collections.abc import Iterable
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING
from typing import Any
from typing import cast

from ..errors import UsageError
from ._resolve import resolve_or_explain
from .migration_report import MigrationReport
from .owners import check_sections
from .owners import installed_owners
from .owners import owned_sections
from .schema import RewardConfig

if TYPE_CHECKING:
    from omegaconf import DictConfig

__all__ = ["ConfigPlan", "MigrationReport", "Migrated", "anchor_holders", "check_sections",
           "config_file_kind", "load_config", "load_plan", "owned_sections",
           "parse_text", "read_and_migrate", "read_config_file", "read_migrated", "read_text",
           "resolve_or_explain"]


SHELL_SUFFIXES = (".sh", ".bash", ".overrides", ".txt")
YAML_SUFFIXES = (".yaml", ".yml", ".json")


def read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        raise UsageError(f"cannot read config {path!r}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"config {path!r} is not UTF-8 text (byte {exc.object[exc.start : exc.start + 1]!r} at "
            f"offset {exc.start} cannot be decoded)\nsave it as UTF-8"
        ) from None


#: a YAML config may reuse nodes through aliases (``&a`` / ``*a``), but not expand to more values than this
MAX_EXPANDED_VALUES = 100_000


def _expanded_size(data: Any, limit: int) -> int:
    """How many values ``data`` has once its shared (aliased) nodes are copied out, counted up to
    ``limit`` only: each distinct node is sized once, so a billion-laughs document costs nothing."""
    sizes: dict[int, int] = {}
    stack: list[tuple[Any, bool]] = [(data, False)]
    while stack:
        node, done = stack.pop()
        if not isinstance(node, (dict, list)) or (not done and id(node) in sizes):
            continue
        children = list(node.values()) if isinstance(node, dict) else node
        if not done:
            sizes[id(node)] = -1  # in progress: a cycle counts as over the limit
            stack.append((node, True))
            stack.extend((c, False) for c in children if isinstance(c, (dict, list)) and id(c) not in sizes)
            continue
        total = 1
        for c in children:
            if isinstance(c, (dict, list)):
                s = sizes.get(id(c), limit + 1)
                total += limit + 1 if s < 0 else s
            else:
                total += 1
            if total > limit:
                total = limit + 1
                break
        sizes[id(node)] = total
    s = sizes.get(id(data), 1)
    return limit + 1 if s < 0 else s


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


def read_config_file(path: str) -> dict[str, Any]:
    """Read a YAML config, or a shell launch script's / overrides file's ``KEY=VALUE`` words, into a dict."""
    data = parse_text(path, read_text(path))[1]
    return {k: v for k, v in data.items() if not _between_owners(k)}


def _between_owners(key: Any) -> bool:
    """``__name__`` top-level keys: what one owner's reader leaves for another's migration."""
    return isinstance(key, str) and key.startswith("__") and key.endswith("__")


def parse_text(path: str, text: str) -> tuple[str, dict[str, Any]]:
    """The kind (``yaml`` / ``shell``) and content of a config file's text."""
    kind = config_file_kind(path, text)
    if kind == "shell":
        reader = next((o.read_script for o in installed_owners() if o.read_script is not None), None)
        if reader is None:
            raise UsageError("no installed owner reads launch scripts\npass a YAML config")
        try:
            return kind, reader(text)
        except UsageError as exc:
            if str(exc).startswith("the file is neither"):
                raise UsageError(f"config {path!r} is{str(exc)[len('the file is'):]}") from None
            raise
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise UsageError(f"config {path!r} is not valid YAML: {exc}") from None
    except RecursionError:
        raise UsageError(f"config {path!r} is nested too deeply to read") from None
    if data is None:
        return kind, {}
    if _expanded_size(data, MAX_EXPANDED_VALUES) > MAX_EXPANDED_VALUES:
        raise UsageError(
            f"config {path!r} expands to over {MAX_EXPANDED_VALUES:,} values through YAML aliases "
            "(&name / *name)\nwrite the values out, or reuse fewer nested aliases"
        )
    if not isinstance(data, dict):
        raise UsageError(f"config {path!r} must be a mapping at the top level, not {type(data).__name__}")
    return kind, data


def read_and_migrate(path: str | None = None, overrides: Iterable[str] = (), *,
                     source: Mapping[str, Any] | None = None) -> tuple[dict[str, Any], Any]:
    """Read a config file (optional), apply overrides, migrate legacy keys: the raw migrated dict.

    Every entry point reaches this, through :func:`read_migrated` (:func:`load_plan`, ``rewardhub migrate``).

    :param source: the file's content when the caller has read it already (the file is not read again).
    """
    from .overrides import apply_overrides

    raw: dict[str, Any] = (
        dict(source) if source is not None else parse_text(path, read_text(path))[1] if path else {}
    )
    overrides = list(overrides)
    if overrides:
        raw = apply_overrides(_remote_long_form(raw, overrides), overrides)
    import copy

    cfg, report = copy.deepcopy(raw), MigrationReport()
    for owner in installed_owners():  # the core's reward keys first, then each installed owner's
        cfg = owner.migrate(cfg, report)
    return {k: v for k, v in cfg.items() if not _between_owners(k)}, report


def _remote_long_form(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """``reward.remote: URL`` written as ``{url: URL}`` when an override sets a key under it
    (``reward.remote.retry_for_s=60``), so that the override adds to the URL instead of replacing it."""
    reward = raw.get("reward")
    if isinstance(reward, dict) and isinstance(reward.get("remote"), str) and any(
        o.lstrip("+").startswith("reward.remote.") for o in overrides
    ):
        return {**raw, "reward": {**reward, "remote": {"url": reward["remote"]}}}
    return raw


def _resolve_paths(
    reward: dict[str, Any], file_dir: str | None, from_file: set[str], notes: list[str]
) -> None:
    """Make term paths absolute: a path written in the config file is relative to the file's folder,
    one typed as an override is relative to the working directory; say so when both exist."""
    for i, term in enumerate(reward.get("rewards") or []):
        g = term.get("grader") if isinstance(term, dict) else None
        if isinstance(g, str) and not g.startswith("${") and not os.path.isabs(os.path.expanduser(g)):
            near = os.path.join(file_dir, g) if file_dir and g in from_file else None
            term["grader"] = os.path.abspath(near if near and os.path.exists(near) else os.path.expanduser(g))
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
            notes.append(
                f"reward.rewards[{i}].path {p!r} exists relative to both the config file and the working "
                f"directory; it came from {origin}, so it is {chosen}"
            )
        term["path"] = chosen


def _strings(node: Any) -> set[str]:
    """Every string value in a parsed config (where a term's path may have been written)."""
    if isinstance(node, (Mapping, list, tuple)):
        return set().union(*map(_strings, node.values() if isinstance(node, Mapping) else node))
    return {node} if isinstance(node, str) else set()


def anchor_holders(text: str) -> set[str]:
    """The top-level keys of a YAML document whose value carries an anchor (``key: &name ...``).

    Read from the parser's events (nothing is constructed), because the loaded data no longer says
    which node had an anchor.
    """
    import yaml

    holders: set[str] = set()
    depth, is_key, key = 0, True, None
    for ev in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(ev, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
            continue
        opens = isinstance(ev, (yaml.MappingStartEvent, yaml.SequenceStartEvent))
        if depth == 1 and isinstance(ev, (yaml.ScalarEvent, yaml.AliasEvent, yaml.MappingStartEvent,
                                          yaml.SequenceStartEvent)):
            if is_key:
                key = ev.value if isinstance(ev, yaml.ScalarEvent) else None
            elif key is not None and not isinstance(ev, yaml.AliasEvent) and ev.anchor:
                holders.add(key)
            is_key = not is_key
        if opens:
            depth += 1
    return holders


@dataclass(frozen=True)
class Migrated:
    """A config file read once, overridden and migrated, its top-level sections checked.

    :ivar kind: ``yaml`` or ``shell`` (a launch script).
    :ivar text: the file's text (``""``: overrides only).
    :ivar source: the file's content as read, before overrides and migration.
    :ivar config: the migrated config (plain containers; ``reward:`` not validated yet).
    :ivar report: what the migration of legacy keys did.
    """

    kind: str
    text: str
    source: dict[str, Any]
    config: dict[str, Any]
    report: MigrationReport


def read_migrated(path: str | None = None, overrides: Iterable[str] = (), *,
                  keep_unknown: bool = False) -> Migrated:
    """The loader's first steps, for :func:`load_plan` and ``rewardhub migrate``: read the file once,
    apply overrides, migrate legacy keys, check the top-level sections.

    :param keep_unknown: keep a key verl does not have in the report (``rewardhub migrate`` warns about
        it) instead of raising the report's error (a misspelt verl key: never run without the setting
        it meant).
    """
    import copy

    kind, text = "yaml", ""
    source: dict[str, Any] = {}
    if path:
        text = read_text(path)
        kind, source = parse_text(path, text)
    cfg, report = read_and_migrate(path, overrides, source=copy.deepcopy(source))
    if report.unknown and not keep_unknown:
        raise report.unknown_error()
    check_sections(cfg, anchors=lambda: anchor_holders(text) if kind == "yaml" and text else set())
    return Migrated(kind, text, source, cfg, report)


@dataclass(frozen=True)
class ConfigPlan:
    """A config read, overridden, migrated and validated once: what every command works from.

    :ivar document: the whole document as read and migrated (reward file paths absolute,
        interpolations as written); :attr:`config` is it as a ``DictConfig``.
    :ivar reward: the ``reward:`` section, validated (interpolations resolved, defaults filled): a frozen
        :class:`~rewardhub.config.schema.RewardConfig` every layer takes as it is.
    :ivar report: what the migration of legacy keys did.
    :ivar path: the file it was read from (``None``: overrides only).
    """

    document: Any
    reward: RewardConfig
    report: MigrationReport
    path: str | None = None

    @functools.cached_property
    def config(self) -> DictConfig:
        """:attr:`document` as a read-only ``DictConfig``, made when first asked (``score`` never asks:
        OmegaConf is a tenth of its start-up): the trainer's sections are checked from it, and a run
        writes it out. Its ``reward`` is raw data: use :attr:`reward`."""
        from omegaconf import OmegaConf

        whole = self.document if OmegaConf.is_config(self.document) else OmegaConf.create(self.document)
        OmegaConf.set_readonly(whole, True)  # the plan is read once and never changed afterwards
        return cast("DictConfig", whole)


def load_plan(
    path: str | None = None, overrides: Iterable[str] = (), *, base_dir: str | None = None
) -> ConfigPlan:
    """Read the file once, apply overrides, migrate once, validate ``reward:`` once (see
    :func:`load_config`)."""
    from .fields import has_interpolation
    from .schema import validate_reward

    overrides = list(overrides)
    file_dir = base_dir or (os.path.dirname(os.path.abspath(path)) if path else None)
    read = read_migrated(path, overrides)
    kind, from_path, cfg, report = read.kind, read.source, read.config, read.report
    section = cfg.get("reward")
    if section is not None and not isinstance(section, Mapping):
        raise UsageError(f"reward must be a mapping, not {type(section).__name__} {section!r}\n"
                         "e.g. reward: {rewards: [{name: math_verify}]}")
    reward = dict(section or {})
    notes: list[str] = report.notes
    written = {
        str(t[k]) for t in reward.get("rewards") or [] if isinstance(t, Mapping)
        for k in ("path", "grader") if isinstance(t.get(k), str)
    }
    if kind == "shell":
        # a launch script's overrides are typed as on the command line: cwd-relative
        from_file: set[str] = set()
    elif path and overrides:
        from_file = written & _strings(from_path)  # the paths the file itself wrote
    elif path or base_dir:
        from_file = written
    else:
        from_file = set()
    _resolve_paths(reward, file_dir, from_file, notes)
    whole: Any = {**cfg, "reward": reward} if section is not None else cfg
    if not has_interpolation(reward):
        return ConfigPlan(copy.deepcopy(whole), validate_reward(reward), report, path)
    from omegaconf import OmegaConf

    # interpolations resolve against the whole document (``${data.x}``), then the section is checked once
    whole = OmegaConf.create(whole)
    return ConfigPlan(whole, validate_reward(resolve_or_explain(whole.reward, "reward")), report, path)


def load_config(
    path: str | None = None, overrides: Iterable[str] = (), *, base_dir: str | None = None
) -> Any:
    """Read a config the one way every entry point does: :func:`load_plan`'s document.

    Applies ``KEY=VALUE`` overrides (Hydra's ``+``/``++`` accepted), migrates legacy reward keys
    (one :class:`~rewardhub.RewardhubDeprecationWarning` per key), validates ``reward:``, and makes
    reward file paths absolute (relative to the YAML config file when written there; relative to the
    working directory when typed as an override, or in a launch script).

    :returns: the whole config as a read-only ``DictConfig`` (its ``reward`` as written, paths absolute);
        the validated, typed ``reward:`` section is :func:`load_plan`'s ``reward``.
    :raises UsageError: naming the key, the bad value and the fix.
    """
    return load_plan(path, overrides, base_dir=base_dir).config
