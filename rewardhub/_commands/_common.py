"""Helpers shared by the subcommands: registry options and spec rendering."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from .._discovery import find_module_file
from .._discovery import static_docstring
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


def spec_row(spec: RewardSpec) -> dict[str, Any]:
    return {
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
