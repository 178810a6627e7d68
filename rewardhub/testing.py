"""Helpers for plugin authors' tests: registries from inline plugins, fake installed distributions."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .registry import RewardRegistry
from .registry import build_registry

__all__ = ["check_reward", "make_registry", "write_distribution"]


def make_registry(*plugins: Any, include_builtins: bool = True) -> RewardRegistry:
    """A registry from plugin objects (modules or classes with ``rewardhub_register_rewards``), no install.

    Example::

        >>> import rewardhub
        >>> from rewardhub.testing import make_registry
        >>> def shout(*, response, **kw):
        ...     "1.0 for upper-case responses."
        ...     return float(response.isupper())
        >>> class Plugin:
        ...     @rewardhub.hookimpl
        ...     def rewardhub_register_rewards(self):
        ...         return [shout]
        >>> make_registry(Plugin()).get_reward("shout").summary
        '1.0 for upper-case responses.'
    """
    return build_registry(plugins=plugins, builtins=include_builtins)


def write_distribution(
    root: str | os.PathLike[str],
    name: str,
    version: str = "0.1.0",
    entry_points: Mapping[str, Mapping[str, str]] | None = None,
    modules: Mapping[str, str] | None = None,
) -> Path:
    """Write an installed-looking distribution (a ``.dist-info`` folder plus modules) under ``root``.

    Put ``root`` on ``PYTHONPATH`` (or ``sys.path``) and ``importlib.metadata`` finds it, exactly
    as it finds a ``pip install --target`` folder.

    :param entry_points: group -> {entry point name: "module:attr"}.
    :param modules: dotted module name -> source; packages get ``__init__.py`` files.
    :returns: the dist-info folder.
    """
    root = Path(root)
    norm = name.replace("-", "_")
    info = root / f"{norm}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    lines = []
    for group, eps in (entry_points or {}).items():
        lines.append(f"[{group}]")
        lines.extend(f"{k} = {v}" for k, v in eps.items())
        lines.append("")
    (info / "entry_points.txt").write_text("\n".join(lines))
    for mod, source in (modules or {}).items():
        parts = mod.split(".")
        for k in range(1, len(parts)):
            pkg = root.joinpath(*parts[:k])
            pkg.mkdir(parents=True, exist_ok=True)
            (pkg / "__init__.py").touch()
        path = root.joinpath(*parts[:-1], parts[-1] + ".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    (info / "RECORD").write_text("")
    return info


def check_reward(
    reward: str | Mapping[str, Any],
    rows: Any = None,
    *,
    executors: tuple[str, ...] | None = None,
    default_timeout_s: float = 10.0,
) -> list[Any]:
    """Run the reward contract (what ``rewardhub test`` checks) and raise ``AssertionError`` with the
    table of checks when one fails; returns the checks.

    :param reward: a registered reward name, or a ``reward:`` section (a mapping with ``rewards``).
    :param rows: the samples to score (default: three small built-in rows).
    :param executors: those compared (default: inline and process, and ray when the reward declares it).
    """
    from ._commands._common import table
    from ._contract import FAIL
    from ._contract import run_contract
    from .config.schema import validate_reward

    section = validate_reward({"rewards": [{"name": reward}]} if isinstance(reward, str) else reward)
    checks = run_contract(section, rows, executors=executors, default_timeout_s=default_timeout_s)
    if any(c.status == FAIL for c in checks):
        raise AssertionError(
            "the reward contract fails:\n"
            + table(
                [[c.term, c.contract, c.status, c.detail] for c in checks],
                ["reward", "contract", "result", "detail"],
            )
        )
    return checks
