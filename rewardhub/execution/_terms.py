"""Reward terms: one config entry resolved against the registry (spec, loaded callable, policy, weight)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from typing import Any
from typing import Protocol

from .._ratelimit import paced
from ..config.frozen import thaw
from ..config.schema import RewardConfig
from ..config.schema import TermConfig
from ..decorator import CHECK_KWARGS_ATTR
from ..decorator import POLICY_KEYS
from ..errors import UsageError
from ..types import ExecutionPolicy
from ..types import RewardSpec
from ._calls import Invoker
from ._calls import make_invoker
from ._calls import params_of
from ._outcome import Outcome
from ._task import WorkerPayload

__all__ = ["ExecutorFactory", "RemoteExecutor", "Term", "resolve_term", "resolve_terms", "sandbox_settings"]


@dataclass
class Term:
    """One resolved reward term of a config."""

    name: str
    spec: RewardSpec
    policy: ExecutionPolicy
    invoker: Invoker
    #: the validated config term it was resolved from (what a Ray reward worker resolves again)
    config: TermConfig
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
    def routes(self) -> str:
        """Where the term applies, in words: ``data_source in ['a', 'b']``, ``extra_info.tags has one of
        ['x']``, or both joined by ``and`` (``""``: every row)."""
        parts = [f"data_source in {list(self.data_sources)!r}"] if self.data_sources else []
        if self.tags:
            parts.append(f"extra_info.tags has one of {list(self.tags)!r}")
        return " and ".join(parts)

    @property
    def payload(self) -> WorkerPayload:
        return WorkerPayload(self.spec.target, self.spec.sha256, self.spec.params, self.invoker.kind,
                             self.invoker.adapter, self.name, memory_limit_mb=self.policy.memory_limit_mb,
                             max_concurrency=self.policy.max_concurrency)


def sandbox_settings(reward_cfg: RewardConfig) -> dict[str, Any]:
    """The ``reward.sandbox`` section as a plain dict (what a reward with the ``sandbox`` capability gets)."""
    return dataclasses.asdict(reward_cfg.sandbox)


def resolve_terms(reward_cfg: Any, registry: Any = None) -> list[Term]:
    """Every term of a ``reward:`` section (a :class:`~rewardhub.config.schema.RewardConfig`, or raw:
    validated here), resolved against ``registry`` (built if not given)."""
    from ..config.schema import validate_reward
    from ..registry import build_registry

    reward = validate_reward(reward_cfg)
    if registry is None:
        registry = build_registry(reward)
    if not reward.rewards:
        raise UsageError("reward.rewards is empty: name at least one reward term\n"
                         "e.g. reward: {rewards: [{name: math_verify}]} (see `rewardhub list`)")
    sandbox = sandbox_settings(reward)
    rm = thaw(dataclasses.asdict(reward.reward_model))
    return [
        resolve_term(registry, t, i, sandbox=sandbox, reward_model=rm) for i, t in enumerate(reward.rewards)
    ]


def resolve_term(
    registry: Any,
    term_cfg: TermConfig,
    index: int = 0,
    *,
    sandbox: Mapping[str, Any] | None = None,
    reward_model: Mapping[str, Any] | None = None,
) -> Term:
    """Turn one validated config term into a :class:`Term`: the spec, the loaded callable, the merged policy.

    :param sandbox: the ``reward.sandbox`` settings; a reward whose spec has the ``sandbox``
        capability gets them as the keyword argument ``sandbox`` (a plain dict), unless the
        term's own ``kwargs`` set ``sandbox``.
    :param reward_model: the ``reward.reward_model`` settings, passed the same way (keyword
        ``reward_model``) to rewards with the ``reward_model`` capability.
    """
    spec = registry.term_spec(term_cfg)
    spec, fn = registry.load_full(spec)
    kind = term_cfg.kind or spec.kind
    name = str(term_cfg.alias or spec.name)
    policy = spec.policy.merged(**{k: getattr(term_cfg, k) for k in POLICY_KEYS})
    kwargs = thaw(term_cfg.kwargs)  # the function gets plain dicts and lists, as the config gave
    # max_rpm counts requests where they go: to the endpoint of a reward that sends its own and paces them
    # itself (it takes base_url, and max_rpm by name or **kwargs: the judges; one bucket per endpoint,
    # retries counted), else to the term (each call, each try)
    names, takes_any = params_of(fn)
    to_endpoint = bool(policy.max_rpm) and "base_url" in names and ("max_rpm" in names or takes_any)
    if to_endpoint:
        kwargs["max_rpm"] = min(policy.max_rpm, kwargs.get("max_rpm") or math.inf)
    paces = bool(policy.max_rpm) and not to_endpoint
    invoker = make_invoker(paced(fn, f"term {name}", policy.max_rpm) if paces else fn, kind, term_cfg.adapter,
                           name)
    if paces and (policy.executor in ("process", "ray") or (
            policy.executor == "inline" and policy.timeout_s and not invoker.is_async)):
        raise UsageError(f"reward {name!r}: max_rpm paces the calls of one process, and this term runs in "
                         "worker processes\ngive it executor: thread (or inline, for an async reward)")
    # the config's own list wins, an empty one included (routing off); unset: the reward's own routes
    data_sources = spec.data_sources if term_cfg.data_sources is None else tuple(term_cfg.data_sources)
    if sandbox is not None and "sandbox" in spec.capabilities and "sandbox" not in kwargs:
        kwargs["sandbox"] = dict(sandbox)
    if reward_model is not None and "reward_model" in spec.capabilities and "reward_model" not in kwargs:
        kwargs["reward_model"] = dict(reward_model)
    check = getattr(fn, CHECK_KWARGS_ATTR, None)
    if check is not None:  # a reward that checks its own kwargs (the judges): before any call
        try:
            check(kwargs)
        except UsageError as exc:
            raise UsageError(f"reward term {name!r}: {exc}") from None
    return Term(name=name, spec=spec, policy=policy, invoker=invoker, weight=term_cfg.weight,
                kwargs=kwargs, data_sources=data_sources, tags=tuple(term_cfg.tags), adapter=term_cfg.adapter,
                config=term_cfg)


class RemoteExecutor(Protocol):
    """Scores terms somewhere else (``executor: ray``: on Ray reward workers)."""

    def score_term(self, term_name: str, samples: Sequence[Mapping[str, Any]],
                   indices: Sequence[int]) -> list[Outcome]:
        """Raw outcomes of one term for ``samples`` (``indices``: their places in the runner's batch)."""

    def workers_info(self) -> list[dict[str, Any]]: ...  # one dict of facts per worker started so far

    def pool_figures(self) -> list[dict[str, Any]]: ...  # each of its pools' (RewardWorkerPool's)

    def close(self) -> None: ...


#: builds the executor of one named pool (``None``: the default pool) for the terms that run on it
ExecutorFactory = Callable[[str | None, list[Term]], RemoteExecutor]
