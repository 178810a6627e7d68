"""The reward registry: name -> RewardSpec, built from every source in load order."""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterable
from collections.abc import Mapping
from typing import Any
from typing import final

from ._discovery import find_module_file
from ._discovery import scan_entry_points
from ._manager import RewardhubPluginManager
from ._manager import env_autoload
from ._manager import env_plugins
from ._specs import core_version
from ._specs import entry_point_specs
from ._specs import matches_source
from ._specs import source_key
from ._specs import specs_from_hook_result
from ._targets import file_sha256
from ._targets import load_target
from ._targets import sha256
from .decorator import spec_from_object
from .errors import BrokenRewardError
from .errors import ConflictingRewardError
from .errors import DuplicateRewardError
from .errors import UnknownRewardError
from .errors import UsageError
from .types import RewardSpec

__all__ = ["RewardRegistry", "build_registry", "builds_in_process", "get_registry", "core_version"]

#: how many registries :func:`build_registry` built in this process (see :func:`builds_in_process`)
_builds = 0


@final
class RewardRegistry:
    """Reward specs by name, plus the plugins that provided them.

    Build one with :func:`build_registry`; never pickle it: send names and specs instead.
    """

    def __init__(self) -> None:
        self._name2spec: dict[str, RewardSpec] = {}
        self._loaded: dict[str, tuple[RewardSpec, Any]] = {}
        self.plugins: list[dict[str, Any]] = []
        self.blocked: frozenset[str] = frozenset()
        #: old reward name -> (current name, plugin that declared it), from ``rewardhub_legacy_aliases``
        self.aliases: dict[str, tuple[str, str]] = {}
        #: reward name -> the specs of every installed source that registers it (two or more);
        #: the name itself is listed with status ``conflict`` until a config chooses
        self.conflicts: dict[str, list[RewardSpec]] = {}

    # ---- lookup -------------------------------------------------------------
    def get_reward(self, name: str) -> RewardSpec:
        """Return the spec registered under ``name``.

        :raises UnknownRewardError: with close matches and the valid names.
        """
        try:
            return self._name2spec[name]
        except KeyError:
            if name in self.aliases and self.aliases[name][0] in self._name2spec:
                import warnings

                from .deprecated import REWARD_ALIAS
                from .errors import RewardhubDeprecationWarning

                new, plugin = self.aliases[name]
                warnings.warn(
                    REWARD_ALIAS.format(old=name, new=new, plugin=plugin),
                    RewardhubDeprecationWarning,
                    stacklevel=2,
                )
                return self._name2spec[new]
            raise UnknownRewardError(name, self._name2spec) from None


    def collect_aliases(self, pm: Any) -> None:
        """Merge the ``rewardhub_legacy_aliases`` of every plugin; an alias mapped two ways breaks the
        second plugin (recorded like any broken plugin)."""
        for plugin, result in pm.call_each("rewardhub_legacy_aliases", "rewardhub_legacy_aliases: "):
            if not isinstance(result or {}, Mapping):
                pm.mark_broken(plugin, f"rewardhub_legacy_aliases: returned a {type(result).__name__}, not a "
                                       "mapping of old reward names to current ones", *pm.dist_of(plugin))
                continue
            for old, new in dict(result or {}).items():
                seen = self.aliases.get(str(old))
                if seen is not None and seen[0] != str(new):
                    pm.mark_broken(plugin, f"alias {old!r} -> {new!r} conflicts with {old!r} -> {seen[0]!r} "
                                           f"from {seen[1]}")
                    continue
                self.aliases[str(old)] = (str(new), plugin)

    def has_reward(self, name: str) -> bool:
        return name in self._name2spec

    def __contains__(self, name: object) -> bool:
        return name in self._name2spec

    def __len__(self) -> int:
        return len(self._name2spec)

    def names(self) -> list[str]:
        return sorted(self._name2spec)

    def list_rewards(self) -> list[RewardSpec]:
        return [self._name2spec[n] for n in sorted(self._name2spec)]

    def add(self, spec: RewardSpec, *, installed: bool = False) -> RewardSpec:
        """Register a spec; a second spec under the same name is a :class:`DuplicateRewardError`.

        :param installed: ``spec`` comes from an installed source (built-in, plugin, entry point):
            a name that another installed source registers too is not an error here but a
            conflict (:attr:`conflicts`), which only a config that uses the name must settle.
        """
        old = self._name2spec.get(spec.name)
        if old is not None and old != spec:
            if installed and (spec.name in self.conflicts or source_key(old) != source_key(spec)):
                return self._conflict(spec)
            raise DuplicateRewardError(spec.name, old.origin, spec.origin)
        self._name2spec[spec.name] = spec
        return spec

    def _conflict(self, spec: RewardSpec) -> RewardSpec:
        first = self._name2spec[spec.name]
        specs = self.conflicts.setdefault(spec.name, [first])
        specs.append(spec)
        marker = specs[0].with_(
            status="conflict", error="registered by " + " and by ".join(s.origin for s in specs)
        )
        self._name2spec[spec.name] = marker
        return marker

    def prefer(self, choices: Mapping[str, str]) -> None:
        """Settle conflicts: reward name -> the plugin or distribution whose spec the name keeps.

        :raises UsageError: a name that no source registers, or a choice that matches none of its sources.
        """
        for name, choice in choices.items():
            specs = self.conflicts.get(name) or ([self._name2spec[name]] if name in self._name2spec else [])
            if not specs:
                raise UnknownRewardError(name, list(self._name2spec), "in reward.plugins.prefer")
            chosen = [s for s in specs if matches_source(s, str(choice))]
            if len(chosen) != 1:
                raise UsageError(
                    f"reward.plugins.prefer: {{{name}: {choice}}} matches {len(chosen)} of the sources "
                    f"that register {name!r}: {', '.join(s.origin for s in specs)}\n"
                    f"name one of: {', '.join(source_key(s) for s in specs)}"
                )
            self._name2spec[name] = chosen[0]
            self.conflicts.pop(name, None)

    def _check_usable(self, spec: RewardSpec) -> None:
        if spec.status == "conflict":
            raise ConflictingRewardError(
                spec.name, [(source_key(s), s.origin) for s in self.conflicts[spec.name]]
            )
        if spec.status != "ok":
            raise BrokenRewardError(
                f"reward {spec.name!r} is broken: {spec.error}\nfrom {spec.origin}",
                plugin_name=spec.plugin or spec.name,
                dist=spec.dist,
            )

    def term_spec(self, term: Any) -> RewardSpec:
        """The spec a config term uses: a registry name, or a function in a file or module.

        File and module terms are registered (source ``config``) under the term's alias, else the
        function name.
        """
        from .config.schema import check_term_source
        from .config.schema import checked_term

        term = checked_term(term)  # a TermConfig as it is
        name, path, module, function = term.name, term.path, term.module, term.function
        check_term_source(name, path, module, function, "reward term")
        if path is None and module is None:
            spec = self.get_reward(str(name))
            self._check_usable(spec)
            return spec
        function = function or "compute_score"
        alias = term.alias or (name if name is not None else function)
        if path is not None:
            path = os.path.abspath(os.path.expanduser(str(path)))
            if not os.path.isfile(path):
                raise UsageError(
                    f"reward file {path!r} does not exist (reward term {alias!r})\n"
                    "fix the term's path (a relative path in a YAML config is resolved against the file's "
                    "folder; "
                    "one given as an override or in a launch script, against the working directory)"
                )
            sha = file_sha256(path)
            target = f"{path}:{function}"
            spec = RewardSpec(name=str(alias), target=target, source="config", sha256=sha)
        else:
            if find_module_file(str(module)) is None:
                raise UsageError(
                    f"reward module {module!r} cannot be imported (reward term {alias!r})\n"
                    "install it, or add its folder to PYTHONPATH"
                )
            spec = RewardSpec(name=str(alias), target=f"{module}:{function}", source="config")
        existing = self._name2spec.get(spec.name)
        if existing is not None and existing.source == "config" and existing.target == spec.target:
            return existing
        return self.add(spec)

    # ---- loading ------------------------------------------------------------
    def load(self, spec_or_name: RewardSpec | str) -> Any:
        """Import and return the callable a spec names (cached per process)."""
        return self.load_full(spec_or_name)[1]

    def load_full(self, spec_or_name: RewardSpec | str) -> tuple[RewardSpec, Any]:
        """Like :meth:`load`, and also the spec completed with the function's own metadata."""
        spec = spec_or_name if isinstance(spec_or_name, RewardSpec) else self.get_reward(spec_or_name)
        cached = self._loaded.get(spec.name)
        if cached is not None and cached[0].target == spec.target:
            return cached
        self._check_usable(spec)
        try:
            obj = load_target(spec.target, spec.sha256)
        except (Exception, SystemExit) as exc:
            raise BrokenRewardError(
                f"reward {spec.name!r} could not be loaded from {spec.target!r} "
                f"({spec.origin}): {type(exc).__name__}: {exc}",
                plugin_name=spec.plugin or spec.name,
                dist=spec.dist,
            ) from exc
        return self.use_object(spec, obj)

    def use_object(self, spec: RewardSpec, obj: Any) -> tuple[RewardSpec, Any]:
        """Resolve ``spec`` to ``obj`` from now on, without loading its target: what :meth:`load_full`
        does after the import (``rewardhub check`` reads reward files instead of importing them, and
        hands in a stand-in with the function's signature)."""
        if spec.params:
            obj = functools.partial(obj, **dict(spec.params))
        meta = getattr(obj, "__rewardhub__", None)  # @reward's record, or a plain dict (see plain_meta)
        probe = spec_from_object(obj, target=spec.target, source=spec.source, name=spec.name)
        full = spec.with_(
            summary=spec.summary or probe.summary,
            capabilities=tuple(sorted(set(spec.capabilities) | set(probe.capabilities))),
        )
        if meta:  # @reward metadata fills what the spec left at its defaults
            full = full.with_(
                kind=probe.kind if spec.kind == "function" else spec.kind,
                policy=probe.policy,
                data_sources=spec.data_sources or probe.data_sources,
            )
        self._loaded[spec.name] = (full, obj)
        return full, obj

    # ---- identity -----------------------------------------------------------
    def fingerprint_items(self) -> dict[str, str]:
        """name -> what identifies its code: ``dist==version``, ``sha256:<hex>`` or ``builtin==<v>``."""
        items: dict[str, str] = {}
        for name, spec in self._name2spec.items():
            if spec.sha256:
                ident = f"sha256:{spec.sha256}"
            elif spec.source == "builtin":
                ident = f"rewardhub=={core_version()}"
            elif spec.dist:
                ident = f"{spec.dist}=={spec.version}"
            else:
                ident = f"module:{spec.target}"
            if spec.status == "conflict":
                ident = "conflict: " + ", ".join(sorted(source_key(s) for s in self.conflicts[name]))
            elif spec.status != "ok":
                ident += " (broken)"
            items[name] = ident
        return items

    def fingerprint(self) -> str:
        """Stable hash of :meth:`fingerprint_items`: equal in every process with the same installation."""
        blob = json.dumps(sorted(self.fingerprint_items().items()), separators=(",", ":"))
        return sha256(blob.encode()).hexdigest()[:16]


def plugin_manager(reward_cfg: Any = None) -> RewardhubPluginManager:
    """The plugins a registry built from ``reward_cfg`` would load (built-ins, entry points, forced ones,
    less the blocked), for calling hooks other than the registration ones (``rewardhub_doctor_lines``)."""
    return _loaded_plugins(reward_cfg, None, None, True)[0]


class _NoSection:  # the schema's default reward section: `rewardhub list` need not import the schema
    rewards = ()

    class plugins:  # noqa: N801 - read as the section's attribute
        autoload, load, block = True, (), ()
        prefer: dict[str, str] = {}


def _reward_section(reward_cfg: Any) -> Any:
    if reward_cfg is None or reward_cfg is _NoSection:
        return _NoSection
    from .config.schema import validate_reward

    return validate_reward(reward_cfg)


def _loaded_plugins(reward_cfg: Any, autoload: bool | None, plugins: Iterable[Any] | None,
                    builtins: bool) -> tuple[RewardhubPluginManager, list[Any], tuple[str, ...], bool]:
    """``(manager, entry points, forced plugin names, autoload)``: steps 1-4 of :func:`build_registry`."""
    plugins_cfg = _reward_section(reward_cfg).plugins
    block = frozenset(plugins_cfg.block)
    pm = RewardhubPluginManager()
    if plugins is not None:
        pm.load_given(plugins, builtins=builtins)
        return pm, [], (), False
    if autoload is None:
        autoload = env_autoload() and plugins_cfg.autoload
    load = tuple(env_plugins()) + plugins_cfg.load
    eps = scan_entry_points()
    pm.load_plugins(eps, autoload=autoload, load=load, block=block)
    return pm, eps, load, autoload


def build_registry(reward_cfg: Any = None, *, autoload: bool | None = None,
                   plugins: Iterable[Any] | None = None, builtins: bool = True) -> RewardRegistry:
    """Build a fresh registry from every source, in the documented load order.

    1. built-in rewards; 2. ``rewardhub`` entry points (pluggy plugins); 3. ``rewardhub.rewards``
    entry points (lazy); 4. plugins forced by ``REWARDHUB_PLUGINS`` / ``reward.plugins.load``,
    autoload off with ``REWARDHUB_DISABLE_PLUGIN_AUTOLOAD`` / ``reward.plugins.autoload: false``,
    blocked names from ``reward.plugins.block``; 5. file and module terms of ``reward.rewards``.

    :param reward_cfg: the config's ``reward`` section (a :class:`~rewardhub.config.schema.RewardConfig`, or a
        mapping or DictConfig that is checked into one), optional.
    :param plugins: plugin objects to register in place of the installed ones (no entry point
        and no environment variable is read); what :func:`rewardhub.testing.make_registry` uses.
    :param builtins: with ``plugins``, whether the built-in rewards are registered too.
    """
    global _builds
    _builds += 1
    reward = _reward_section(reward_cfg)
    block = frozenset(reward.plugins.block)
    pm, eps, load, autoload = _loaded_plugins(reward, autoload, plugins, builtins)
    registry = RewardRegistry()
    registry.blocked = block
    registry.collect_aliases(pm)
    for name, result in pm.call_each("rewardhub_register_rewards"):
        dist, version = pm.dist_of(name)
        source = "builtin" if name.startswith("rewardhub.builtin.") else "plugin"
        try:
            specs = specs_from_hook_result(result, name, dist, version, source)
        except (Exception, SystemExit) as exc:
            pm.mark_broken(name, f"{type(exc).__name__}: {exc}", dist, version)
            continue
        for spec in specs:
            if spec.name not in block:
                registry.add(spec, installed=True)
    for name, (dist, version, error) in sorted(pm.broken.items()):
        registry.add(RewardSpec(name=name, target=name, source="plugin", dist=dist, version=version,
                                plugin=name, status="broken", error=error), installed=True)
    forced = set(load)
    for spec in entry_point_specs(eps, block, autoload, forced):  # rewardhub.rewards, rewardhub.graders
        registry.add(spec, installed=True)
    registry.prefer(dict(reward.plugins.prefer))

    for term in reward.rewards:
        if term.path is not None or term.module is not None:
            registry.term_spec(term)
    registry.plugins = pm.facts()
    return registry


def builds_in_process() -> int:
    """How many registries this process has built (each scans the entry points and calls every plugin's
    hooks): a debug counter; a command's driver builds one, and passes it to what needs it."""
    return _builds


@functools.cache
def get_registry() -> RewardRegistry:
    """This process's registry from the installed sources (cached; ``get_registry.cache_clear()``)."""
    return build_registry()
