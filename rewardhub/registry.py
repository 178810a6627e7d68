"""The reward registry: name -> RewardSpec, built from every source in load order."""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Iterable
from collections.abc import Mapping
from typing import Any
from typing import final

from ._discovery import REWARD_GROUP
from ._discovery import find_module_file
from ._discovery import scan_entry_points
from ._manager import RewardhubPluginManager
from ._manager import env_autoload
from ._manager import env_plugins
from ._targets import file_sha256
from ._targets import load_target
from .decorator import spec_from_object
from .errors import BrokenRewardError
from .errors import DuplicateRewardError
from .errors import UnknownRewardError
from .errors import UsageError
from .types import RewardSpec

__all__ = ["RewardRegistry", "build_registry", "get_registry", "core_version"]


@functools.cache
def core_version() -> str:
    """The installed rewardhub version (``0+unknown`` from a bare checkout)."""
    import importlib.metadata

    try:
        return importlib.metadata.version("rewardhub")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"


def _get(cfg: Any, key: str, default: Any = None) -> Any:
    if cfg is None:
        return default
    if isinstance(cfg, Mapping):
        value = cfg.get(key, default)
    else:
        value = getattr(cfg, key, default)
    return default if value is None else value


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
                warnings.warn(REWARD_ALIAS.format(old=name, new=new, plugin=plugin), RewardhubDeprecationWarning,
                              stacklevel=2)
                return self._name2spec[new]
            raise UnknownRewardError(name, self._name2spec) from None

    get = get_reward

    def collect_aliases(self, pm: Any) -> None:
        """Merge the ``rewardhub_legacy_aliases`` of every plugin; an alias mapped two ways breaks the
        second plugin (recorded like any broken plugin)."""
        for impl in pm.hook.rewardhub_legacy_aliases.get_hookimpls():
            try:
                result = dict(impl.function() or {})
            except Exception as exc:
                pm.broken[impl.plugin_name] = (None, None, f"rewardhub_legacy_aliases: {type(exc).__name__}: {exc}")
                continue
            for old, new in result.items():
                seen = self.aliases.get(str(old))
                if seen is not None and seen[0] != str(new):
                    pm.broken[impl.plugin_name] = (None, None, f"alias {old!r} -> {new!r} conflicts with "
                                                   f"{old!r} -> {seen[0]!r} from {seen[1]}")
                    continue
                self.aliases[str(old)] = (str(new), impl.plugin_name)

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

    def require(self, names: Iterable[str], where: str | None = None) -> list[RewardSpec]:
        """Return the specs of ``names``, raising one error that lists every missing name."""
        names = list(names)
        missing = [n for n in names if n not in self._name2spec]
        if len(missing) == 1:
            raise UnknownRewardError(missing[0], self._name2spec, where)
        if missing:
            raise UsageError(
                f"missing rewards{(' ' + where) if where else ''}: {', '.join(map(repr, missing))}\n"
                "see `rewardhub list` for the registered names"
            )
        return [self._name2spec[n] for n in names]

    # ---- registration -------------------------------------------------------
    def add(self, spec: RewardSpec) -> RewardSpec:
        """Register a spec; a second spec under the same name is a :class:`DuplicateRewardError`."""
        old = self._name2spec.get(spec.name)
        if old is not None and old != spec:
            raise DuplicateRewardError(spec.name, old.origin, spec.origin)
        self._name2spec[spec.name] = spec
        return spec

    def term_spec(self, term: Any) -> RewardSpec:
        """The spec a config term uses: a registry name, or a function in a file or module.

        File and module terms are registered (source ``config``) under the term's alias, else the
        function name.
        """
        name = _get(term, "name")
        path = _get(term, "path")
        module = _get(term, "module")
        function = _get(term, "function")
        if sum(x is not None for x in (name, path, module)) == 0:
            raise UsageError(
                "reward term has neither 'name' nor 'path' nor 'module'\n"
                "set name: <registered reward> or path: file.py (+ function: fn)"
            )
        if path is not None and module is not None:
            raise UsageError(f"reward term sets both path={path!r} and module={module!r}; keep one")
        if path is None and module is None:
            spec = self.get_reward(str(name))
            if spec.status != "ok":
                raise BrokenRewardError(
                    f"reward {spec.name!r} is broken: {spec.error}\nfrom {spec.origin}",
                    plugin_name=spec.plugin or spec.name,
                    dist=spec.dist,
                )
            return spec
        function = function or "compute_score"
        alias = _get(term, "alias") or (name if name is not None else function)
        if path is not None:
            path = os.path.abspath(os.path.expanduser(str(path)))
            if not os.path.isfile(path):
                raise UsageError(
                    f"reward file {path!r} does not exist (reward term {alias!r})\n"
                    "fix the term's path (a relative path in a YAML config is resolved against the file's folder; "
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
        if spec.status != "ok":
            raise BrokenRewardError(
                f"reward {spec.name!r} is broken: {spec.error}\nfrom {spec.origin}",
                plugin_name=spec.plugin or spec.name,
                dist=spec.dist,
            )
        try:
            obj = load_target(spec.target, spec.sha256)
        except (Exception, SystemExit) as exc:
            raise BrokenRewardError(
                f"reward {spec.name!r} could not be loaded from {spec.target!r} "
                f"({spec.origin}): {type(exc).__name__}: {exc}",
                plugin_name=spec.plugin or spec.name,
                dist=spec.dist,
            ) from exc
        if spec.params:
            obj = functools.partial(obj, **dict(spec.params))
        meta = getattr(obj, "__rewardhub__", None)
        probe = spec_from_object(obj, target=spec.target, source=spec.source, name=spec.name)
        full = spec.with_(
            summary=spec.summary or probe.summary,
            capabilities=tuple(sorted(set(spec.capabilities) | set(probe.capabilities))),
        )
        if meta:  # @reward metadata fills what the spec left at its defaults
            full = full.with_(
                kind=meta.get("kind", spec.kind) if spec.kind == "function" else spec.kind,
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
            if spec.status != "ok":
                ident += " (broken)"
            items[name] = ident
        return items

    def fingerprint(self) -> str:
        """Stable hash of :meth:`fingerprint_items`: equal in every process with the same installation."""
        blob = json.dumps(sorted(self.fingerprint_items().items()), separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _spec_for_reward_ep(ep: Any) -> RewardSpec:
    """A lazy spec for a ``rewardhub.rewards`` entry point: nothing is imported."""
    status, error = "ok", None
    if not ep.attr:
        status, error = "broken", f"entry point {ep.name!r} = {ep.value!r} names no attribute ('module:function')"
    elif find_module_file(ep.module) is None:
        status, error = "broken", f"No module named {ep.module!r}"
    return RewardSpec(
        name=ep.name,
        target=ep.value.replace(" ", ""),
        source="entry-point",
        dist=ep.dist,
        version=ep.version,
        plugin=ep.name,
        status=status,
        error=error,
    )


def _specs_from_hook_result(result: Any, plugin: str, dist: str | None, version: str | None,
                            source: str) -> list[RewardSpec]:
    specs = []
    for item in result or ():
        if isinstance(item, RewardSpec):
            spec = item
            if spec.dist is None and dist is not None:
                spec = spec.with_(dist=dist, version=version)
            specs.append(spec.with_(source=source, plugin=spec.plugin or plugin))
        elif callable(item):
            target = f"{item.__module__}:{item.__qualname__}"
            specs.append(spec_from_object(item, target=target, source=source, dist=dist,
                                          version=version, plugin=plugin))
        else:
            raise TypeError(f"plugin {plugin!r} returned {item!r}: expected a RewardSpec or a function")
    return specs


def build_registry(reward_cfg: Any = None, *, autoload: bool | None = None) -> RewardRegistry:
    """Build a fresh registry from every source, in the documented load order.

    1. built-in rewards; 2. ``rewardhub`` entry points (pluggy plugins); 3. ``rewardhub.rewards``
    entry points (lazy); 4. plugins forced by ``REWARDHUB_PLUGINS`` / ``reward.plugins.load``,
    autoload off with ``REWARDHUB_DISABLE_PLUGIN_AUTOLOAD`` / ``reward.plugins.autoload: false``,
    blocked names from ``reward.plugins.block``; 5. file and module terms of ``reward.rewards``.

    :param reward_cfg: the config's ``reward`` section (mapping or DictConfig), optional.
    """
    plugins_cfg = _get(reward_cfg, "plugins")
    if autoload is None:
        autoload = env_autoload() and bool(_get(plugins_cfg, "autoload", True))
    load = tuple(env_plugins()) + tuple(_get(plugins_cfg, "load", ()) or ())
    block = frozenset(_get(plugins_cfg, "block", ()) or ())

    registry = RewardRegistry()
    registry.blocked = block
    eps = scan_entry_points()
    pm = RewardhubPluginManager()
    pm.load_plugins(eps, autoload=autoload, load=load, block=block)
    registry.collect_aliases(pm)

    for impl in pm.hook.rewardhub_register_rewards.get_hookimpls():
        name = impl.plugin_name
        is_builtin = name.startswith("rewardhub.builtin.")
        dist, version = pm.plugin_dists.get(name, (None, None))
        try:
            result = impl.function()
            specs = _specs_from_hook_result(result, name, dist, version,
                                            "builtin" if is_builtin else "plugin")
        except (Exception, SystemExit) as exc:
            pm.broken[name] = (dist, version, f"{type(exc).__name__}: {exc}")
            continue
        for spec in specs:
            if spec.name not in block:
                registry.add(spec)
    for name, (dist, version, error) in sorted(pm.broken.items()):
        registry.add(RewardSpec(name=name, target=name, source="plugin", dist=dist, version=version,
                                plugin=name, status="broken", error=error))
    forced = set(load)
    for ep in eps:
        if ep.group != REWARD_GROUP or ep.name in block or (ep.dist or "") in block:
            continue
        if autoload or ep.name in forced or (ep.dist or "") in forced:
            registry.add(_spec_for_reward_ep(ep))

    for term in _get(reward_cfg, "rewards", ()) or ():
        if _get(term, "path") is not None or _get(term, "module") is not None:
            registry.term_spec(term)

    registry.plugins = [
        {
            "name": pname,
            "dist": pm.plugin_dists.get(pname, (None, None))[0],
            "version": pm.plugin_dists.get(pname, (None, None))[1],
            "hooks": pm.hooks_of(pname),
            "builtin": pname.startswith("rewardhub.builtin."),
            "status": "ok",
            "error": None,
        }
        for pname, _ in pm.list_name_plugin()
        if pname is not None
    ] + [
        {"name": n, "dist": d, "version": v, "hooks": [], "builtin": False, "status": "broken", "error": e}
        for n, (d, v, e) in pm.broken.items()
    ]
    registry.plugins.sort(key=lambda p: p["name"])
    return registry


@functools.cache
def get_registry() -> RewardRegistry:
    """This process's registry from the installed sources (cached; ``get_registry.cache_clear()``)."""
    return build_registry()
