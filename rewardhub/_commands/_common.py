"""Helpers shared by the subcommands: registry options and spec rendering."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from .._discovery import UNREADABLE
from .._discovery import find_module_file
from .._discovery import static_docstring
from .._discovery import static_meta
from ..types import ExecutionPolicy
from ..types import RewardSpec


def add_registry_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-autoload", action="store_true",
                        help="do not load plugins from entry points (like REWARDHUB_DISABLE_PLUGIN_AUTOLOAD)")
    parser.add_argument("-p", dest="load_plugins", action="append", default=[], metavar="NAME",
                        help="force-load a plugin by entry-point or module name (repeatable)")


def registry_from_args(args: argparse.Namespace) -> Any:
    from ..registry import build_registry

    cfg = {"plugins": {"load": list(args.load_plugins)}}
    return build_registry(cfg, autoload=False if args.no_autoload else None)


def summary(spec: RewardSpec) -> str:
    """The spec's summary; for a lazy entry point, read from the source without importing it."""
    if spec.summary or spec.status != "ok":
        return spec.summary
    module, _, attr = spec.target.partition(":")
    if spec.is_file_target:
        module, _, attr = spec.target.rpartition(":")
        return static_docstring(module, attr)
    return static_docstring(find_module_file(module) or "", attr.split(".")[-1])


def with_declared_policy(spec: RewardSpec) -> tuple[RewardSpec, str]:
    """A lazy entry point's spec with the policy its source declares (read without importing it:
    a plain ``__rewardhub__`` dict or ``@reward`` arguments), and a note: ``""``, or why the
    declaration cannot be read (``"?"`` when it is not made of literals)."""
    from ..decorator import plain_meta
    from ..errors import UsageError

    if spec.source != "entry-point" or spec.status != "ok" or spec.is_file_target:
        return spec, ""
    module, _, attr = spec.target.partition(":")
    raw = static_meta(find_module_file(module) or "", attr.split(".")[-1])
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


def policy_text(spec: RewardSpec) -> str:
    """The settings of ``spec``'s policy that differ from the defaults, e.g. ``timeout 5s, pure``."""
    pol, default = spec.policy, ExecutionPolicy()
    parts = []
    if pol.executor != default.executor:
        parts.append(pol.executor)
    if pol.timeout_s is not None:
        parts.append(f"timeout {pol.timeout_s:g}s")
    if pol.pure:
        parts.append("pure")
    for key in ("max_concurrency", "max_rpm", "retries", "on_failure", "memory_limit_mb"):
        if getattr(pol, key) != getattr(default, key):
            parts.append(f"{key} {getattr(pol, key)}")
    if spec.data_sources:
        more = len(spec.data_sources) - 1
        parts.append(f"data_sources {spec.data_sources[0]}" + (f" +{more}" if more else ""))
    return ", ".join(parts) or "-"


def spec_row(spec: RewardSpec, *, loaded: bool = False) -> dict[str, Any]:
    """``spec`` as a row of ``list`` / ``show``; a spec not ``loaded`` gets the policy its source declares."""
    spec, note = (spec, "") if loaded else with_declared_policy(spec)
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
        "sha256": spec.sha256,
        "source": spec.source,
        "status": spec.status,
        "summary": summary(spec),
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
