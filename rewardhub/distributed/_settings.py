"""PoolSettings: how a :class:`~rewardhub.distributed.RewardWorkerPool` runs its reward workers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["PoolSettings"]


@dataclass(frozen=True)
class PoolSettings:
    """The options of a reward worker pool; ``None``: the ``reward.workers`` section's value.

    :param resources: custom Ray resources each worker needs (placement on a pool of nodes).
    :param dispatch: ``least_loaded`` (default) or ``round_robin``.
    :param runtime_env: a Ray runtime_env for the workers.
    :param ship_files: send reward files' bytes to the workers (else a node must have the file).
    :param strict: any registry difference is fatal, not only in the rewards the config uses.
    :param max_restarts: restarts per worker slot; a dead worker's in-flight samples are re-scored.
    :param call_timeout_s: seconds one score call (a chunk) may take before its worker counts as hung
        and is restarted (default ``reward.workers.call_timeout_s``, else derived from the terms'
        ``timeout_s``: :func:`~rewardhub.distributed._dispatch.call_bound`).
    :param replace_timeout_s: seconds a restarted worker may wait for Ray to place it before the pool
        goes on without it (default ``reward.workers.replace_timeout_s``).
    :param split_models: with ``reward.reward_model.enable``, reward-model terms (capability
        ``reward_model``, executor unset or ``ray``) get workers of their own, from
        ``reward.reward_model`` (see :func:`~rewardhub.distributed._placement.reward_model_pool`).
    :param fleet_cache: the terms with ``cache`` on share one cache across every worker and node (a
        store on this process's node: :mod:`~rewardhub.distributed._fleetcache`); off: each worker has
        its own in memory (a runner that caches before it sends work to the pool turns it off).
    :param cache_dir: the folder of the shared cache's file (``DIR/scores.sqlite``, on this process's
        node): it survives the run; ``None``: in memory for the run.
    """

    num_workers: int | None = None
    pool: str | None = None
    resources: Mapping[str, float] | None = None
    num_cpus: float | None = None
    num_gpus: float | None = None
    dispatch: str | None = None
    address: str | None = None
    runtime_env: Mapping[str, Any] | None = None
    ship_files: bool = True
    strict: bool = False
    max_restarts: int = 3
    max_attempts: int = 3
    chunk_size: int | None = None
    max_inflight: int = 2
    start_timeout_s: float = 300.0
    split_models: bool = True
    call_timeout_s: float | None = None
    replace_timeout_s: float | None = None
    fleet_cache: bool = True
    cache_dir: str | None = None
    #: an ``AutoscaleConfig`` (or its mapping): the pool autoscales on Ray Serve (default
    #: ``reward.workers.autoscale``)
    autoscale: Any = None

    def for_reward_models(self, opts: Mapping[str, Any]) -> PoolSettings:
        """The settings of the reward-model workers split off a pool with these: where and how many
        from ``reward.reward_model`` (``opts``), how they are run and healed from these."""
        return PoolSettings(
            num_workers=opts["num_workers"], num_cpus=opts["num_cpus"], num_gpus=opts["num_gpus"],
            runtime_env=self.runtime_env, ship_files=self.ship_files, strict=self.strict,
            max_restarts=self.max_restarts, max_attempts=self.max_attempts, max_inflight=self.max_inflight,
            start_timeout_s=self.start_timeout_s, split_models=False, call_timeout_s=self.call_timeout_s,
            replace_timeout_s=self.replace_timeout_s, fleet_cache=self.fleet_cache, cache_dir=self.cache_dir)
