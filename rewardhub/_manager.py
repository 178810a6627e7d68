"""The plugin manager: rewardhub's load order, written as code you can read."""

from __future__ import annotations

import functools
import importlib
import os
import sys
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Mapping
from types import FunctionType
from types import MappingProxyType
from types import MethodType
from types import ModuleType
from typing import Any

import pluggy

from . import hookspecs
from ._discovery import PLUGIN_GROUP
from ._discovery import EntryPointInfo

__all__ = ["DEFAULT_PLUGINS", "RewardhubPluginManager", "env_autoload", "env_plugins"]

#: built-in plugin modules, registered first and always
DEFAULT_PLUGINS: tuple[str, ...] = (
    "rewardhub.builtin.format",
    "rewardhub.builtin.grader",
    "rewardhub.builtin.judge",
    "rewardhub.builtin.length",
    "rewardhub.builtin.match",
    "rewardhub.builtin.judge_modes",
)


def env_autoload() -> bool:
    """False when ``REWARDHUB_DISABLE_PLUGIN_AUTOLOAD`` is set to a non-empty value."""
    return not os.environ.get("REWARDHUB_DISABLE_PLUGIN_AUTOLOAD")


def env_plugins() -> tuple[str, ...]:
    """Plugin names forced by ``REWARDHUB_PLUGINS`` (comma separated)."""
    raw = os.environ.get("REWARDHUB_PLUGINS", "")
    return tuple(p.strip() for p in raw.split(",") if p.strip())


_Broken = tuple[str | None, str | None, str]  # dist, version, error text

_ABSENT = object()
#: what pluggy can take a hook implementation from (anything else it skips)
_HOOKABLE = (FunctionType, MethodType, staticmethod, classmethod)


class RewardhubPluginManager(pluggy.PluginManager):
    """A pluggy manager with rewardhub's hookspecs and a record of what failed to load.

    Hooks are called through pluggy, one plugin at a time (:meth:`call_each`), so that one
    plugin's error breaks that plugin only, and ``REWARDHUB_TRACE=1`` shows every call.
    """

    def __init__(self) -> None:
        super().__init__("rewardhub")
        self.add_hookspecs(hookspecs)
        self._broken: dict[str, _Broken] = {}
        #: plugin name -> (dist, version) for entry-point plugins
        self.plugin_dists: dict[str, tuple[str | None, str | None]] = {}
        if os.environ.get("REWARDHUB_TRACE"):
            self.trace.root.setwriter(lambda s: sys.stderr.write(s))
            self.enable_tracing()

    def parse_hookimpl_opts(self, plugin: Any, name: str) -> Any:
        if isinstance(plugin, ModuleType):
            # a module's value that pluggy would skip (a constant, an imported module or class) is skipped
            # without pluggy's static lookup: that lookup of every name was most of `list`'s registering
            value = plugin.__dict__.get(name, _ABSENT)
            if value is not _ABSENT and not isinstance(value, _HOOKABLE):
                return {} if name.startswith("rewardhub_") and callable(value) else None
        opts = super().parse_hookimpl_opts(plugin, name)
        if opts is None and name.startswith("rewardhub_") and callable(getattr(plugin, name, None)):
            # unmarked functions with our prefix count too, so a typo is caught by check_pending
            return {}
        return opts

    def load_defaults(self) -> None:
        for modname in DEFAULT_PLUGINS:
            self.register(importlib.import_module(modname), name=modname)

    def load_given(self, plugins: Iterable[Any], *, builtins: bool = True) -> None:
        """Register plugin objects given by the caller (tests), after the built-ins when ``builtins``.

        :raises pluggy.PluginValidationError: a misspelled ``rewardhub_*`` hook (a test should fail
            on it, where an installed plugin is only marked broken).
        """
        if builtins:
            self.load_defaults()
        for i, plugin in enumerate(plugins):
            self.register(plugin, name=getattr(plugin, "__name__", None) or f"plugin-{i}")
        self.check_pending()

    def _load(self, name: str, load: Callable[[], Any], dist: str | None = None,
              version: str | None = None) -> None:
        """Register plugin ``name``, the object ``load()`` imports (an entry point's, or a module forced by
        ``REWARDHUB_PLUGINS`` / ``reward.plugins.load``); a failure is recorded, not raised."""
        if self.has_plugin(name) or name in self.broken:
            return
        try:
            self.register(load(), name=name)
        # a broken plugin (even one calling sys.exit) must not break the others
        except (Exception, SystemExit) as exc:
            self.mark_broken(name, f"{type(exc).__name__}: {exc}", dist, version)
            return
        self.plugin_dists[name] = (dist, version)

    def load_plugins(
        self,
        eps: Iterable[EntryPointInfo],
        *,
        autoload: bool,
        load: Iterable[str] = (),
        block: Iterable[str] = (),
    ) -> None:
        """Load built-ins, then entry points (when autoloading), then forced plugins."""
        blocked = set(block)
        for name in blocked:
            self.set_blocked(name)
        self.load_defaults()
        plugin_eps = [ep for ep in eps if ep.group == PLUGIN_GROUP]
        by_name = {ep.name: ep for ep in plugin_eps}
        if autoload:
            for ep in plugin_eps:
                if ep.name not in blocked and (ep.dist or "") not in blocked:
                    self._load(ep.name, ep.load, ep.dist, ep.version)
        for name in load:
            if name in blocked:
                continue
            found = by_name.get(name)
            if found is not None:
                self._load(name, found.load, found.dist, found.version)
            else:
                self._load(name, functools.partial(importlib.import_module, name))
        self._check_pending()

    def _check_pending(self) -> None:
        """Turn each plugin with a misspelled ``rewardhub_*`` hook into a broken plugin."""
        while True:
            try:
                self.check_pending()
                return
            except pluggy.PluginValidationError as exc:
                name = self.get_name(exc.plugin) or str(exc.plugin)
                self.unregister(exc.plugin)
                self.mark_broken(name, str(exc), *self.dist_of(name))

    def hooks_of(self, name: str) -> list[str]:
        """Sorted hook names a registered plugin implements."""
        plugin = self.get_plugin(name)
        if plugin is None:
            return []
        return sorted(c.name for c in (self.get_hookcallers(plugin) or []))

    # ---- broken plugins ---------------------------------------------------------------------
    @property
    def broken(self) -> Mapping[str, _Broken]:
        """Plugin name -> (dist, version, error text) of every plugin that failed (read-only)."""
        return MappingProxyType(self._broken)

    def mark_broken(self, name: str, error: str, dist: str | None = None, version: str | None = None) -> None:
        """Record plugin ``name`` as broken (its rewards are listed with this error)."""
        self._broken[name] = (dist, version, error)

    def dist_of(self, name: str) -> tuple[str | None, str | None]:
        """(dist, version) of an entry-point plugin; ``(None, None)`` for others."""
        return self.plugin_dists.get(name, (None, None))

    # ---- calling hooks ----------------------------------------------------------------------
    def call_each(self, hook_name: str, error_prefix: str = "", **kwargs: Any) -> Iterator[tuple[str, Any]]:
        """Call a hook once per plugin, through pluggy; yields (plugin name, its result).

        Each call goes through a subset of the hook's caller holding that plugin's
        implementation (and every wrapper), so pluggy's tracing and ``wrapper=True``
        implementations work as in a plain hook call; ``kwargs`` are the hook's arguments. A plugin
        whose call raises is marked broken (``error_prefix`` + the error) and skipped.
        """
        impls = getattr(self.hook, hook_name).get_hookimpls()
        plain = [i for i in impls if not (i.hookwrapper or i.wrapper)]
        for impl in plain:
            others = [i.plugin for i in plain if i is not impl]
            caller = self.subset_hook_caller(hook_name, remove_plugins=others)
            try:
                results = caller(**kwargs)
            except (Exception, SystemExit) as exc:  # one plugin's error must not break the others
                self.mark_broken(impl.plugin_name, f"{error_prefix}{type(exc).__name__}: {exc}",
                                 *self.dist_of(impl.plugin_name))
                continue
            yield impl.plugin_name, results[0] if results else None

    # ---- facts ------------------------------------------------------------------------------
    def facts(self) -> list[dict[str, Any]]:
        """One dict per plugin, loaded or broken, sorted by name (what ``rewardhub list`` shows)."""
        facts = [self._fact(n, *self.dist_of(n), None) for n, _ in self.list_name_plugin() if n is not None]
        facts += [self._fact(n, d, v, e) for n, (d, v, e) in self.broken.items()]
        return sorted(facts, key=lambda p: p["name"])

    def _fact(self, name: str, dist: str | None, version: str | None, error: str | None) -> dict[str, Any]:
        ok = error is None
        return {"name": name, "dist": dist, "version": version, "hooks": self.hooks_of(name) if ok else [],
                "builtin": ok and name.startswith("rewardhub.builtin."), "status": "ok" if ok else "broken",
                "error": error}
