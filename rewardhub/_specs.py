"""Specs from the installed sources (hook results, lazy entry points), and how a source is named."""

from __future__ import annotations

import functools
from typing import Any

from ._discovery import find_module_file
from .decorator import spec_from_object
from .types import RewardSpec

__all__ = ["core_version", "entry_point_specs", "matches_source", "reward_facts", "source_key",
           "spec_for_reward_ep", "specs_from_hook_result"]


@functools.cache
def core_version() -> str:
    """The installed rewardhub version (``0+unknown`` from a bare checkout)."""
    import importlib.metadata

    try:
        return importlib.metadata.version("rewardhub")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"


def source_key(spec: RewardSpec) -> str:
    """What names a spec's source in ``reward.plugins.prefer`` / ``block``: its distribution, else its
    plugin."""
    if spec.source == "builtin":
        return spec.plugin or "builtin"
    return spec.dist or spec.plugin or spec.target


def _norm(name: str) -> str:
    return name.lower().replace("_", "-")


def matches_source(spec: RewardSpec, choice: str) -> bool:
    return _norm(choice) in {_norm(x) for x in (spec.dist, spec.plugin) if x} or choice == source_key(spec)


def spec_for_reward_ep(ep: Any) -> RewardSpec:
    """A lazy spec for a ``rewardhub.rewards`` entry point: nothing is imported."""
    status, error = "ok", None
    if not ep.attr:
        status, error = (
            "broken",
            f"entry point {ep.name!r} = {ep.value!r} names no attribute ('module:function')",
        )
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


def entry_point_specs(eps: Any, block: Any, autoload: bool, forced: Any) -> list[RewardSpec]:
    """The lazy specs of the ``rewardhub.rewards`` and ``rewardhub.graders`` entry points a registry takes:
    not blocked (by name or distribution), and autoloaded or forced."""
    from ._discovery import GRADER_GROUP
    from ._discovery import REWARD_GROUP

    out = []
    for ep in eps:
        if ep.group not in (REWARD_GROUP, GRADER_GROUP) or ep.name in block or (ep.dist or "") in block:
            continue
        if autoload or ep.name in forced or (ep.dist or "") in forced:
            if ep.group == GRADER_GROUP:  # a grader file a package ships: a reward of the entry point's name
                from .graders import spec_for_grader_ep

                out.append(spec_for_grader_ep(ep))
            else:
                out.append(spec_for_reward_ep(ep))
    return out


def specs_from_hook_result(result: Any, plugin: str, dist: str | None, version: str | None,
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


def reward_facts(spec: Any, identity: str | None = None) -> dict[str, Any]:
    """What identifies a reward (its :class:`RewardSpec`, or ``None`` when the registry lacks it):
    source, distribution and version, target, sha256 of a file reward, and ``identity`` (its
    fingerprint item, the value compared between processes). A built-in's distribution is rewardhub.
    """
    out = {k: getattr(spec, k, None) for k in ("source", "dist", "version", "target", "sha256")}
    if spec is not None and spec.source == "builtin" and not spec.dist:
        out.update(dist="rewardhub", version=core_version())
    return {**out, "identity": identity} if identity is not None or spec is None else out
