"""Helpers shared by the subcommands: registry options, loading a config, and spec rendering."""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from collections.abc import Sequence
from typing import Any

from .._discovery import find_module_file
from .._source_facts import UNREADABLE
from .._source_facts import static_docstring
from .._source_facts import static_meta
from .._source_facts import static_params
from ..types import ExecutionPolicy
from ..types import RewardSpec


def add_registry_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-autoload", action="store_true",
                        help="do not load plugins from entry points (like REWARDHUB_DISABLE_PLUGIN_AUTOLOAD)")
    parser.add_argument("-p", dest="load_plugins", action="append", default=[], metavar="NAME",
                        help="force-load a plugin by entry-point or module name (repeatable)")


def registry_from_args(args: argparse.Namespace) -> Any:
    from ..registry import build_registry

    # no -p: no reward section to check (the registry's stand-in for the default one; the schema is
    # a tenth of `rewardhub list`'s start-up)
    cfg = {"plugins": {"load": list(args.load_plugins)}} if args.load_plugins else None
    return build_registry(cfg, autoload=False if args.no_autoload else None)


def load_plan_quiet(
    config: str | None, overrides: Sequence[str]
) -> tuple[Any, list[warnings.WarningMessage]]:
    """:func:`~rewardhub.config.load_plan`, the legacy keys it migrates counted in the plan's report
    (see :func:`migration_line`) instead of warned one by one; returns the plan and its other warnings."""
    from ..config import load_plan
    from ..errors import RewardhubDeprecationWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plan = load_plan(config, overrides)
    return plan, [w for w in caught if not issubclass(w.category, RewardhubDeprecationWarning)]


def migration_line(moved: Sequence[Any], dropped: Sequence[Any], config: str | None,
                   overrides: Sequence[str] = ()) -> str | None:
    """One line for all the legacy keys a config had (``check`` and ``score`` print it); None if none."""
    import shlex

    if not (moved or dropped):
        return None
    words = shlex.join([*([config] if config else []), *overrides])
    return f"legacy keys: {len(moved)} moved, {len(dropped)} dropped (see `rewardhub migrate {words}`)"


def load_plan_told(config: str | None, overrides: Sequence[str]) -> Any:
    """:func:`load_plan_quiet` for a command that runs the config: the legacy keys in one line on stderr,
    the other warnings raised again."""
    plan, others = load_plan_quiet(config, overrides)
    if line := migration_line(plan.report.moved, plan.report.dropped, config, overrides):
        print(line, file=sys.stderr)
    for w in others:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return plan


def summary(spec: RewardSpec, module_file: str | None = None) -> str:
    """The spec's summary; for a lazy entry point, read from the source without importing it."""
    if spec.summary or spec.status != "ok":
        return spec.summary
    return static_docstring(*_source(spec, module_file))


def with_declared_policy(spec: RewardSpec, module_file: str | None = None) -> tuple[RewardSpec, str]:
    """A lazy entry point's spec with the policy its source declares (read without importing it:
    a plain ``__rewardhub__`` dict or ``@reward`` arguments), and a note: ``""``, or why the
    declaration cannot be read (``"?"`` when it is not made of literals)."""
    from ..decorator import plain_meta
    from ..errors import UsageError

    if spec.source != "entry-point" or spec.status != "ok" or spec.is_file_target:
        return spec, ""
    raw = static_meta(*_source(spec, module_file))
    if raw is None:
        return spec, ""
    if raw == UNREADABLE:
        return spec, "?"
    try:
        meta = plain_meta(raw, f"reward {spec.name!r} ({spec.target})")
    except UsageError as exc:
        return spec, f"invalid: {exc}".replace("\n", "; ")
    return spec.with_(policy=meta["policy"], data_sources=spec.data_sources or meta["data_sources"],
                      kind=meta["kind"] if spec.kind == "function" else spec.kind), ""


def reads(spec: RewardSpec, loaded: bool, module_file: str | None = None) -> str:
    """What a reward reads: ``trajectory`` (it takes ``messages``), ``text``, or ``?`` (a lazy entry
    point whose source does not show its parameters)."""
    if "trajectory" in spec.capabilities:
        return "trajectory"
    if loaded or spec.source != "entry-point" or spec.status != "ok":
        return "text"
    names = static_params(*_source(spec, module_file))
    return "?" if names is None else "trajectory" if "messages" in names else "text"


def policy_text(spec: RewardSpec) -> str:
    """The settings of ``spec``'s policy that differ from the defaults, e.g. ``timeout 5s, pure``."""
    pol, default = spec.policy, ExecutionPolicy()
    parts = []
    if pol.executor != default.executor:
        parts.append(pol.executor)
    if pol.timeout_s is not None:
        parts.append(f"timeout {pol.timeout_s:g}s")
    parts.extend(flag for flag in ("pure", "cache") if getattr(pol, flag))
    for key in ("max_concurrency", "max_rpm", "retries", "on_failure", "memory_limit_mb"):
        if getattr(pol, key) != getattr(default, key):
            parts.append(f"{key} {getattr(pol, key)}")
    if spec.data_sources:
        more = len(spec.data_sources) - 1
        parts.append(f"data_sources {spec.data_sources[0]}" + (f" +{more}" if more else ""))
    return ", ".join(parts) or "-"


def _source(spec: RewardSpec, module_file: str | None) -> tuple[str, str]:
    """The source file and top-level name of ``spec``'s target (``module_file``: its module's file,
    where the caller has found it)."""
    if spec.is_file_target:
        file, _, attr = spec.target.rpartition(":")
    else:
        module, _, attr = spec.target.partition(":")
        file = module_file if module_file is not None else find_module_file(module) or ""
    return file, attr.split(".")[-1]


def spec_row(spec: RewardSpec, *, loaded: bool = False) -> dict[str, Any]:
    """``spec`` as a row of ``list`` / ``show``; a spec not ``loaded`` gets the policy its source declares."""
    lazy = spec.source == "entry-point" and spec.status == "ok" and not spec.is_file_target
    # a lazy entry point's module is found once for the three readings of its source
    module_file = (find_module_file(spec.target.partition(":")[0]) or "") if lazy and not loaded else None
    spec, note = (spec, "") if loaded else with_declared_policy(spec, module_file)
    return {
        "data_sources": list(spec.data_sources),
        "policy": {k: getattr(spec.policy, k) for k in spec.policy.__slots__},
        "policy_text": note or policy_text(spec),
        "capabilities": list(spec.capabilities),
        "dist": spec.dist,
        "error": spec.error,
        "kind": spec.kind,
        "name": spec.name,
        "plugin": spec.plugin,
        "reads": reads(spec, loaded, module_file),
        "sha256": spec.sha256,
        "source": spec.source,
        "status": spec.status,
        "summary": summary(spec, module_file),
        "target": spec.target,
        "version": spec.version,
    }


def dump_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def table(rows: list[list[str]], headers: list[str]) -> str:
    """A plain left-aligned text table; the last column is cut to the terminal width."""
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    try:
        cols = os.get_terminal_size().columns
    except OSError:
        cols = 200
    out = []
    for r in [headers, ["-" * w for w in widths], *rows]:
        line = "  ".join(str(c).ljust(widths[i]) for i, c in enumerate(r[:-1]))
        last = str(r[-1])
        room = max(cols - len(line) - 2, 20)
        if len(last) > room:
            last = last[: room - 1] + "…"
        out.append((line + "  " + last).rstrip())
    return "\n".join(out)
