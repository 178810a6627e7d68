"""The registry adapter: reward names and config in, scores out.

Only the ``reward:`` section (plain data) crosses process boundaries; each process builds its own
registry from it through :class:`rewardhub.execution.Runner`, and proves it with the registry
fingerprint. :class:`RewardBackend` is the small interface the reward-worker actor uses, so the
later ``rewardhub.distributed`` workers can replace :class:`RunnerBackend` without touching the loop.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from typing import Protocol

from rewardhub.errors import RewardhubError
from rewardhub.errors import UnknownRewardError
from rewardhub.errors import UsageError

__all__ = ["RewardBackend", "RunnerBackend", "ScoreResult", "registry_fingerprint", "validate_rewards"]


@dataclass
class ScoreResult:
    scores: list[float]  #: None (not applicable / failed) becomes NaN
    terms: list[dict[str, float]]
    metrics: dict[str, float]


class RewardBackend(Protocol):
    def score(self, samples: Sequence[Mapping[str, Any]]) -> ScoreResult: ...

    def fingerprint(self) -> str: ...

    def close(self) -> None: ...


def _to_node(reward_cfg: Mapping[str, Any]) -> Any:
    from omegaconf import OmegaConf

    return OmegaConf.create(dict(reward_cfg))


def _nan(value: Any) -> float:
    if value is None:
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


class RunnerBackend:
    """Scores with a :class:`rewardhub.execution.Runner` built in this process from the config."""

    def __init__(self, reward_cfg: Mapping[str, Any]) -> None:
        from rewardhub.execution import Runner

        self.reward_cfg = dict(reward_cfg)
        self.runner = Runner.from_config(_to_node(reward_cfg))

    def score(self, samples: Sequence[Mapping[str, Any]]) -> ScoreResult:
        res = self.runner.score([dict(s) for s in samples])
        terms = [{k: _nan(v) for k, v in dict(r).items()} for r in (res.rewards or [{}] * len(samples))]
        metrics = {k: float(v) for k, v in dict(res.metrics or {}).items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool)}
        return ScoreResult(scores=[_nan(s) for s in res.scores], terms=terms, metrics=metrics)

    def fingerprint(self) -> str:
        return registry_fingerprint(self.reward_cfg)

    def close(self) -> None:
        self.runner.close()


def registry_fingerprint(reward_cfg: Mapping[str, Any]) -> str:
    """The fingerprint of the registry this process builds from ``reward:``.

    It covers the installed sources (what ``get_registry()`` holds: dist==version per reward) and
    the config's own file and module terms (their sha256), so a worker whose node has a different
    package version or a different copy of a reward file shows a different fingerprint.
    """
    from rewardhub.registry import build_registry

    return str(build_registry(_to_node(reward_cfg)).fingerprint())


def validate_rewards(reward_cfg: Mapping[str, Any]) -> str:
    """Resolve every reward term in the driver, before Ray starts; return the driver's fingerprint.

    :raises UsageError: naming the term (``reward.rewards[i].name``) and the valid choices.
    """
    from rewardhub.registry import build_registry

    node = _to_node(reward_cfg)
    try:
        registry = build_registry(node)
    except UsageError:
        raise
    except RewardhubError as exc:
        raise UsageError(f"reward: {exc}") from exc
    for i, term in enumerate(reward_cfg.get("rewards") or []):
        name = term.get("name") if isinstance(term, Mapping) else None
        if not name or term.get("path") or term.get("module"):
            continue
        try:
            registry.get_reward(name)
        except UnknownRewardError as exc:
            raise UsageError(f"reward.rewards[{i}].name: {exc}") from exc
    try:
        backend = RunnerBackend(reward_cfg)  # resolves file/module terms too
    except UsageError:
        raise
    except RewardhubError as exc:
        raise UsageError(f"reward: {exc}") from exc
    try:
        return backend.fingerprint()
    finally:
        backend.close()
