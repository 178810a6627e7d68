"""RayExecutor: the runner's ``executor: ray`` -- its terms scored by a :class:`RewardWorkerPool`."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from ..config.schema import PluginsConfig
from ..config.schema import RewardConfig
from ..config.schema import TermConfig
from ..config.schema import WorkersConfig
from ..config.schema import validate_reward
from ..execution import Outcome
from ..execution import Runner
from ..execution import Term
from ..execution import resolve_terms
from ._errors import DriverOnlyRewardError
from ._placement import place_reward_models
from ._pool import RewardWorkerPool

__all__ = ["RayExecutor", "RayExecutors", "runner_from_config"]

_WORKER_KEYS = ("num_workers", "pool", "resources", "num_cpus", "num_gpus", "dispatch", "address",
                "call_timeout_s", "replace_timeout_s", "autoscale")


def _shipped(term: Term) -> TermConfig:
    """The config term a reward worker resolves to ``term`` again: its own, run inline there, with the
    keyword arguments the driver resolved (the ``sandbox`` / ``reward_model`` settings included)."""
    module = term.spec.target.rpartition(":")[0]
    if module == "__main__":
        raise DriverOnlyRewardError(
            f"reward {term.name!r} is defined in the driver's own script (__main__): reward workers cannot "
            "import it\nput it in a module or file the config names (reward.rewards: [{path: file.py, "
            "function: fn}])", reward=term.name, module=module)
    return dataclasses.replace(term.config, alias=term.name, executor="inline", kwargs=dict(term.kwargs))


class RayExecutor:
    """Scores the runner's ``executor: ray`` terms on reward workers (started at the first call).

    :param terms: the runner's resolved terms; only those with ``executor: ray`` are sent, as their
        config terms (:class:`~rewardhub.config.schema.TermConfig`, frozen and picklable).
    :param ray_options: the ``reward.workers`` options; its ``plugins`` key, when the runner passes
        one, is the config's ``reward.plugins`` (a :class:`PluginsConfig`) so the workers load the
        same plugins.
    """

    def __init__(self, terms: Sequence[Term], ray_options: Mapping[str, Any] | None = None) -> None:
        opts = dict(ray_options or {})
        plugins = opts.pop("plugins", None)
        self.terms = [t for t in terms if t.policy.executor == "ray"]
        rewards = tuple(_shipped(t) for t in self.terms)
        if plugins is None:  # a runner built by hand: force the plugins the specs came from
            load = tuple(sorted(
                {t.spec.plugin for t in self.terms if t.spec.source == "plugin" and t.spec.plugin}
                | {t.spec.dist for t in self.terms if t.spec.source == "entry-point" and t.spec.dist}
            ))
            plugins = PluginsConfig(load=load)
        workers = {k: opts[k] for k in _WORKER_KEYS if opts.get(k) is not None}
        workers["num_workers"] = max(1, int(workers.get("num_workers") or 1))
        #: what the reward workers get: the ray terms, the plugins and the pool's options (typed,
        #: pickled as is)
        self.reward_cfg = RewardConfig(
            rewards=rewards,
            workers=WorkersConfig(**workers),
            plugins=plugins if isinstance(plugins, PluginsConfig) else PluginsConfig(**plugins),
        )
        self.extra = {k: v for k, v in opts.items() if k not in _WORKER_KEYS}
        self._workers: RewardWorkerPool | None = None
        self._start_lock = threading.Lock()  # the Runner's callers may be several threads

    @property
    def workers(self) -> RewardWorkerPool:
        """The reward workers, started at the first use (once, whichever thread comes first)."""
        with self._start_lock:
            if self._workers is None:
                self._workers = RewardWorkerPool(
                    self.reward_cfg,
                    **{k: v for k, v in self.extra.items() if k in ("runtime_env", "ship_files", "strict")},
                    fleet_cache=False,  # the runner's own cache (its file too) answers before the pool
                )
            return self._workers

    def workers_info(self) -> list[dict[str, Any]]:
        """Facts of the reward workers (none before the first score)."""
        return self._workers.workers_info() if self._workers is not None else []

    def pool_figures(self) -> list[dict[str, Any]]:
        """The figures of the reward workers' pools (none before the first score)."""
        return self._workers.pool_figures() if self._workers is not None else []

    def score_term(self, term_name: str, samples: Sequence[Mapping[str, Any]],
                   indices: Sequence[int]) -> list[Outcome]:
        """Raw outcomes of one term for ``samples`` (``indices``: their places in the runner's batch)."""
        return self.workers.score_outcomes(samples, [term_name], indices)[term_name]

    def close(self) -> None:
        if self._workers is not None:
            self._workers.close()
            self._workers = None


class RayExecutors:
    """The runner's ``ray`` executor factory: a :class:`RayExecutor` per named Ray pool.

    :param ray_options: the ``reward.workers`` options (and ``plugins``), for the default pool.
    :param pools: options of the other pools that terms name (``Term.pool``), e.g. the reward-model pool.
    """

    def __init__(self, ray_options: Mapping[str, Any] | None = None,
                 pools: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self.ray_options = dict(ray_options or {})
        self.pools = {k: dict(v) for k, v in (pools or {}).items()}

    def __call__(self, pool: str | None, terms: list[Term]) -> RayExecutor:
        # a term's pool None: reward.workers' pool
        return RayExecutor(
            terms, self.pools.get(pool, self.ray_options) if pool is not None else self.ray_options
        )


def runner_from_config(reward_cfg: Any, registry: Any = None, *, terms: list[Term] | None = None,
                       **kwargs: Any) -> Runner:
    """A :class:`~rewardhub.execution.Runner` for a ``reward:`` section, ``executor: ray`` included.

    :param reward_cfg: a :class:`~rewardhub.config.schema.RewardConfig` (a loaded plan's), or a raw
        section, validated here.

    :param terms: the section's terms, where the caller resolved them already.

    Reward-model terms (``reward.reward_model.enable``) are placed on their own Ray pool; the
    Ray workers start when a term that runs there is first scored.
    """
    reward = validate_reward(reward_cfg)
    terms = resolve_terms(reward, registry) if terms is None else terms
    # reward.workers as Ray options, with reward.plugins so the workers load the same plugins
    opts = {**dataclasses.asdict(reward.workers), "plugins": reward.plugins}
    pools = place_reward_models(reward, terms, opts)
    return Runner(terms, reward.aggregation, executors={"ray": RayExecutors(opts, pools)}, **kwargs)
