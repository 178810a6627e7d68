"""The driver's side of start-up: what a reward worker receives (names, config, file bytes, fingerprint).

Nothing here imports Ray or a reward's code: the driver resolves *specs* only.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import dataclass
from dataclasses import field
from typing import Any

from .._discovery import find_module_file
from .._targets import file_sha256
from ..config.schema import RewardConfig
from ._errors import DriverOnlyRewardError

__all__ = ["ShippedFile", "WorkerSetup", "check_items", "prepare_setup", "used_names", "used_targets"]


@dataclass(frozen=True)
class ShippedFile:
    """A reward file named by the config, with its bytes when the driver ships it."""

    reward: str
    path: str
    sha256: str
    data: bytes | None = None


@dataclass(frozen=True)
class WorkerSetup:
    """Everything a reward worker needs, and nothing live: plain config, names, hashes, file bytes.

    :param reward_cfg: the validated ``reward:`` section (frozen, pickled as it is), with the driver's plugin
        environment (``REWARDHUB_PLUGINS``, ``REWARDHUB_DISABLE_PLUGIN_AUTOLOAD``) folded into ``plugins``.
    :param driver_items: the driver's :meth:`RewardRegistry.fingerprint_items` (see :func:`check_items`).
    :param used: the registry names the config's terms use.
    :param driver_targets: the target (``module:attr``) of each used reward that is not a file (a
        file's copy lives elsewhere on each node: its sha256 is compared instead).
    :param cache_store: the name of the pool's cache store actor (:mod:`._fleetcache`), which the
        worker's cache reads and writes through; ``None``: the worker's own in-memory cache only.
    """

    reward_cfg: RewardConfig
    pool: str
    driver_items: dict[str, str]
    driver_fingerprint: str
    used: tuple[str, ...]
    files: tuple[ShippedFile, ...] = ()
    strict: bool = False
    driver_targets: dict[str, str] = field(default_factory=dict)
    cache_store: str | None = None


def _fold_env(cfg: RewardConfig) -> RewardConfig:
    """Make the driver's plugin environment part of the config, so every worker loads the same."""
    from .._manager import env_autoload
    from .._manager import env_plugins

    plugins = cfg.plugins
    load = tuple(env_plugins()) + tuple(p for p in plugins.load if p not in env_plugins())
    autoload = plugins.autoload and env_autoload()
    return dataclasses.replace(cfg, plugins=dataclasses.replace(plugins, load=load, autoload=autoload))


def used_names(registry: Any, cfg: RewardConfig) -> list[str]:
    """The registry name each term of ``cfg`` uses (a file/module term registers under its alias)."""
    return [registry.term_spec(t).name for t in cfg.rewards]


def check_items(registry: Any, cfg: RewardConfig) -> dict[str, str]:
    """:meth:`fingerprint_items`, with a config ``module:`` term's item extended by its file's hash.

    A module has no version of its own, so two nodes with different copies of ``my_rewards.py``
    on their ``PYTHONPATH`` are told apart by the file's sha256.
    """
    items = dict(registry.fingerprint_items())
    for term in cfg.rewards:
        if term.module is None:
            continue
        spec = registry.term_spec(term)
        file = find_module_file(term.module)
        if file and os.path.isfile(file):
            items[spec.name] = f"{items.get(spec.name, '')} sha256:{file_sha256(file)}"
    return items


def used_targets(registry: Any, used: Any) -> dict[str, str]:
    """``name -> target`` of each used reward this registry has, file rewards left out."""
    out = {}
    for name in used:
        if registry.has_reward(name):
            spec = registry.get_reward(name)
            if not spec.is_file_target:
                out[name] = spec.target
    return out


def check_driver_only(name: str) -> None:
    """Explain a term name that only an ``@reward`` decorator in this process declares."""
    from ..decorator import decorated_in_process

    for qualname, rname in decorated_in_process().items():
        if rname != name:
            continue
        module, _, fn = qualname.partition(":")
        if module == "__main__":
            script = getattr(sys.modules.get("__main__"), "__file__", None) or "the driver script"
            raise DriverOnlyRewardError(
                f"reward {name!r} is registered only by @reward in the driver's own script "
                f"(__main__, {script}); reward workers never import that script\n"
                f"put it in a module or file the config names, e.g. reward.rewards: "
                f"[{{path: {script}, function: {fn}}}], or move it to a module and use "
                f"{{module: my_rewards, function: {fn}}} (importable on every node)",
                reward=name, module=module)
        raise DriverOnlyRewardError(
            f"reward {name!r} is declared with @reward in module {module!r}, but no source registers it "
            "(a decorator alone does not, and workers would never import that module)\n"
            f"put it in a module or file the config names: reward.rewards: "
            f"[{{module: {module}, function: {fn}}}], or declare a 'rewardhub.rewards' entry point",
            reward=name, module=module)


def prepare_setup(reward_cfg: Any, *, pool: str | None = None, ship_files: bool = True,
                  strict: bool = False, reference: WorkerSetup | None = None,
                  registry: Any = None) -> tuple[WorkerSetup, Any]:
    """Resolve every term's spec in the driver and build the :class:`WorkerSetup` (no reward is imported).

    :param reference: the setup the driver itself made, when this runs in another process (e.g. the
        trainer's reward client, an actor that Ray may place on any node, whose installed
        distributions are not the driver's): the workers are then checked against the driver's
        fingerprint items and targets, and get the driver's copies of the reward files, not this
        process's.
    :param reward_cfg: a :class:`~rewardhub.config.schema.RewardConfig` (a loaded plan's, or a setup's),
        taken as it is; a raw section (mapping, ``DictConfig``) is validated here.
    :param registry: the registry this process built from ``reward_cfg`` already (or from a config that
        ``reward_cfg``'s terms are part of, with ``reference``): used as it is, not built again.
    :returns: the setup and this process's registry.
    :raises UsageError: a term names an unknown reward (a ``__main__``-only reward is explained).
    """
    from ..config.schema import validate_reward
    from ..registry import build_registry

    cfg = _fold_env(validate_reward(reward_cfg))
    if pool is not None:
        cfg = dataclasses.replace(cfg, workers=dataclasses.replace(cfg.workers, pool=pool))
    pool_name = cfg.workers.pool or "reward"
    for term in cfg.rewards:
        if term.module == "__main__":
            check_driver_only(str(term.function or term.alias or "compute_score"))
            raise DriverOnlyRewardError(
                "reward term module '__main__' names the driver's own script; workers cannot import it\n"
                "use path: <the script's file> instead", reward=str(term.alias), module="__main__")
    if registry is None:
        registry = build_registry(cfg)
    for term in cfg.rewards:
        if term.path is None and term.module is None and term.name and not registry.has_reward(term.name):
            check_driver_only(term.name)
    used = used_names(registry, cfg)  # raises UnknownRewardError / BrokenRewardError
    if reference is not None:  # this pool's terms, with the driver's values from reference
        return dataclasses.replace(
            reference, reward_cfg=cfg, pool=pool_name, used=tuple(used), strict=strict,
            files=tuple(f for f in reference.files if f.reward in used),
            driver_targets={n: t for n, t in reference.driver_targets.items() if n in used}), registry
    files = []
    for name in used:
        spec = registry.get_reward(name)
        if spec.source == "config" and spec.sha256 and spec.is_file_target:
            path = spec.target.rpartition(":")[0]
            data = None
            if ship_files:
                with open(path, "rb") as f:
                    data = f.read()
                import hashlib

                if hashlib.sha256(data).hexdigest() != spec.sha256:
                    from ..errors import UsageError

                    raise UsageError(f"reward file {path!r} (reward {name!r}) changed while starting the "
                                     "workers\nstart again once it is saved")
            files.append(ShippedFile(name, path, spec.sha256, data))
    setup = WorkerSetup(reward_cfg=cfg, pool=pool_name, driver_items=check_items(registry, cfg),
                        driver_fingerprint=registry.fingerprint(), used=tuple(used), files=tuple(files),
                        strict=strict, driver_targets=used_targets(registry, used))
    return setup, registry
