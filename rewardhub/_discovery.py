"""Entry-point scanning and import-free module lookup."""

from __future__ import annotations

import ast
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import sys
from dataclasses import dataclass
from typing import Any

__all__ = ["PLUGIN_GROUP", "REWARD_GROUP", "EntryPointInfo", "scan_entry_points", "find_module_file"]

#: entry-point group of pluggy plugin modules
PLUGIN_GROUP = "rewardhub"
#: entry-point group of single reward functions
REWARD_GROUP = "rewardhub.rewards"
#: entry-point group of extra CLI subcommands
COMMAND_GROUP = "rewardhub.commands"


@dataclass(frozen=True)
class EntryPointInfo:
    """One entry point, with the distribution that declared it."""

    group: str
    name: str
    value: str
    dist: str | None
    version: str | None
    entry_point: Any

    @property
    def module(self) -> str:
        return self.value.partition(":")[0].strip()

    @property
    def attr(self) -> str:
        return self.value.partition(":")[2].strip()

    def load(self) -> Any:
        return self.entry_point.load()


def _dist_name(dist: importlib.metadata.Distribution) -> str | None:
    try:
        return dist.metadata["Name"]
    except Exception:  # a dist-info without METADATA
        return None


def scan_entry_points(groups: tuple[str, ...] = (PLUGIN_GROUP, REWARD_GROUP)) -> list[EntryPointInfo]:
    """Read the entry points of every installed distribution once, without importing them.

    A distribution found twice on ``sys.path`` counts once (the first, as the import system
    would use it).
    """
    seen: set[str] = set()
    found: list[EntryPointInfo] = []
    for dist in importlib.metadata.distributions():
        name = _dist_name(dist)
        key = (name or "").lower().replace("_", "-")
        if key and key in seen:
            continue
        if key:
            seen.add(key)
        try:
            eps = dist.entry_points
        except Exception:
            continue
        for ep in eps:
            if ep.group in groups:
                found.append(
                    EntryPointInfo(ep.group, ep.name, ep.value, name, dist.version if name else None, ep)
                )
    found.sort(key=lambda e: (e.group, e.name, e.dist or ""))
    return found


def find_module_file(module: str) -> str | None:
    """Locate a module's source file without executing it (or any parent package).

    :returns: the file path, ``""`` for a namespace package or a module with no file, or ``None``
        when the module cannot be found.
    """
    if module in sys.modules:
        return getattr(sys.modules[module], "__file__", "") or ""
    parts = module.split(".")
    path: list[str] | None = None
    spec = None
    for i, part in enumerate(parts):
        search = path if path is not None else sys.path
        try:
            spec = importlib.machinery.PathFinder.find_spec(part, search)
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            if i == 0:
                try:  # a builtin or frozen top-level module
                    spec = importlib.util.find_spec(part)
                except (ImportError, ValueError):
                    spec = None
            if spec is None:
                return None
        path = list(spec.submodule_search_locations or [])
        if i < len(parts) - 1 and not path:
            return None
    assert spec is not None
    origin = spec.origin
    return origin if origin and os.path.exists(origin) else ""


def static_docstring(module_file: str, attr: str) -> str:
    """First docstring line of top-level function/class ``attr`` in a source file, read with ``ast``."""
    if not module_file or not module_file.endswith(".py"):
        return ""
    try:
        with open(module_file, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return ""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == attr:
            doc = ast.get_docstring(node) or ""
            return doc.strip().splitlines()[0].strip() if doc.strip() else ""
    return ""
