"""Reward terms: one config entry resolved against the registry (spec, loaded callable, policy, weight)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import Any

from ..errors import UsageError
from ..types import EXECUTORS
from ..types import ON_FAILURE
from ..types import ExecutionPolicy
from ..types import RewardSpec
from ._calls import Invoker
from ._calls import make_invoker
from ._task import WorkerPayload

__all__ = ["Term", "config_value", "plain", "resolve_term", "resolve_terms", "sandbox_settings"]


def config_value(cfg: Any, key: str, default: Any = None) -> Any:
    """``cfg[key]`` of a mapping or an attribute object; ``default`` when missing or ``None``."""
    if cfg is None:
        return default
    value = cfg.get(key, default) if isinstance(cfg, Mapping) else getattr(cfg, key, default)
    return default if value is None else value


def plain(x: Any) -> Any:
    """DictConfig/ListConfig -> plain containers (cheap no-op for plain data)."""
    if hasattr(x, "_get_node") or type(x).__name__ in ("DictConfig", "ListConfig"):
        from omegaconf import OmegaConf

        return OmegaConf.to_container(x, resolve=True)
    return x


@dataclass
class Term:
    """One resolved reward term of a config."""

    name: str
    spec: RewardSpec
    policy: ExecutionPolicy
    invoker: Invoker
    weight: float = 1.0
    kwargs: dict[str, Any] = field(default_factory=dict)
    data_sources: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    adapter: str = "auto"
    #: for ``executor: ray``: the Ray pool it runs on (``None``: ``reward.workers``' pool)
    pool: str | None = None

    @property
    def routed(self) -> bool:
        """Whether the term applies to some samples only (by data source or tag)."""
        return bool(self.data_sources or self.tags)

    def applies(self, sample: Mapping[str, Any]) -> bool:
        if self.data_sources and sample.get("data_source") not in self.data_sources:
            return False
        if self.tags:
            info = sample.get("extra_info") or {}
            have = info.get("tags") if isinstance(info, Mapping) else None
            have = {have} if isinstance(have, str) else set(have or ())
            if not have & set(self.tags):
                return False
        return True

    @property
    def payload(self) -> WorkerPayload:
        return WorkerPayload(self.spec.target, self.spec.sha256, self.spec.params, self.invoker.kind,
                             self.invoker.adapter, self.name, memory_limit_mb=self.policy.memory_limit_mb,
                             max_concurrency=self.policy.max_concurrency)


def sandbox_settings(reward_cfg: Any) -> dict[str, Any] | None:
    """The ``reward.sandbox`` section as a plain dict (``None`` when the config has none)."""
    section = config_value(reward_cfg, "sandbox")
    if section is None:
        return None
    if dataclasses.is_dataclass(section) and not isinstance(section, type):
        return dataclasses.asdict(section)
    section = plain(section)
    if not isinstance(section, Mapping):
        raise UsageError(f"reward.sandbox must be a mapping (url, max_concurrent, memory_limit_mb, timeout_s, "
                         f"language), got {section!r}")
    return dict(section)


def resolve_terms(reward_cfg: Any, registry: Any = None) -> list[Term]:
    """Every term of a ``reward:`` config section, resolved against ``registry`` (built if not given)."""
    from ..registry import build_registry

    if registry is None:
        registry = build_registry(reward_cfg)
    terms_cfg = config_value(reward_cfg, "rewards", []) or []
    if not terms_cfg:
        raise UsageError("reward.rewards is empty: name at least one reward term\n"
                         "e.g. reward: {rewards: [{name: math_verify}]} (see `rewardhub list`)")
    sandbox = sandbox_settings(reward_cfg)
    rm_section = config_value(reward_cfg, "reward_model")
    rm = dict(plain(rm_section)) if rm_section is not None else None
    return [resolve_term(registry, t, i, sandbox=sandbox, reward_model=rm) for i, t in enumerate(terms_cfg)]


def resolve_term(registry: Any, term_cfg: Any, index: int = 0, *, sandbox: Mapping[str, Any] | None = None,
                 reward_model: Mapping[str, Any] | None = None) -> Term:
    """Turn one config term into a :class:`Term`: the spec, the loaded callable, the merged policy.

    :param sandbox: the ``reward.sandbox`` settings; a reward whose spec has the ``sandbox``
        capability gets them as the keyword argument ``sandbox`` (a plain dict), unless the
        term's own ``kwargs`` set ``sandbox``.
    :param reward_model: the ``reward.reward_model`` settings, passed the same way (keyword
        ``reward_model``) to rewards with the ``reward_model`` capability.
    """
    term_cfg = plain(term_cfg)
    if isinstance(term_cfg, str):
        term_cfg = {"name": term_cfg}
    if not isinstance(term_cfg, Mapping):
        raise UsageError(f"reward.rewards[{index}] must be a mapping, got {term_cfg!r}")
    spec = registry.term_spec(term_cfg)
    spec, fn = registry.load_full(spec)
    kind = config_value(term_cfg, "kind") or spec.kind
    name = str(config_value(term_cfg, "alias") or spec.name)
    for key, allowed in (("executor", EXECUTORS), ("on_failure", ON_FAILURE)):
        value = config_value(term_cfg, key)
        if value is not None and value not in allowed:
            raise UsageError(f"reward.rewards[{index}].{key}={value!r} is not valid\nallowed: {', '.join(allowed)}")
    policy = spec.policy.merged(
        executor=config_value(term_cfg, "executor"),
        timeout_s=config_value(term_cfg, "timeout_s"),
        max_concurrency=config_value(term_cfg, "max_concurrency"),
        retries=config_value(term_cfg, "retries"),
        on_failure=config_value(term_cfg, "on_failure"),
        pure=config_value(term_cfg, "pure"),
        memory_limit_mb=config_value(term_cfg, "memory_limit_mb"),
    )
    adapter = config_value(term_cfg, "adapter", "auto")
    invoker = make_invoker(fn, kind, adapter, name)
    weight = config_value(term_cfg, "weight", 1.0)
    try:
        weight = float(weight)
    except (TypeError, ValueError):
        raise UsageError(f"reward.rewards[{index}].weight={weight!r} is not a number") from None
    data_sources = tuple(config_value(term_cfg, "data_sources", ()) or ()) or spec.data_sources
    kwargs = dict(config_value(term_cfg, "kwargs", {}) or {})
    if sandbox is not None and "sandbox" in spec.capabilities and "sandbox" not in kwargs:
        kwargs["sandbox"] = dict(sandbox)
    if reward_model is not None and "reward_model" in spec.capabilities and "reward_model" not in kwargs:
        kwargs["reward_model"] = dict(reward_model)
    return Term(name=name, spec=spec, policy=policy, invoker=invoker, weight=weight,
                kwargs=kwargs, data_sources=data_sources,
                tags=tuple(config_value(term_cfg, "tags", ()) or ()), adapter=adapter)
