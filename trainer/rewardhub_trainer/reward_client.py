"""The reward client: the run's process that scores rollouts on the reward workers.

:class:`RewardClient` sends every completion of a :class:`~rewardhub_trainer.rollouts.Rollout` to a
:class:`rewardhub.distributed.RewardWorkerPool` (or to a ``rewardhub serve`` server with
``reward.remote``) and writes the scores, the per-term rewards, the ``rewards/<term>/...`` metrics and
the failed calls back into it; :func:`reward_value` is how a returned reward becomes a number (NaN: an
invalid sample). Like the other actors (:mod:`rewardhub_trainer.actors`, which re-exports it) it is a
plain class that :mod:`rewardhub_trainer.loop` wraps with ``ray.remote``.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Collection
from collections.abc import Mapping
from typing import Any
from typing import Protocol
from typing import cast

from rewardhub.config import RewardConfig
from rewardhub.distributed import process_location
from rewardhub.execution import Scorer

from .reward_failures import error_rates
from .reward_failures import failed_without_value
from .reward_failures import failures
from .reward_failures import reward_value
from .rollouts import Rollout

__all__ = ["RewardClient", "RewardPool", "reward_value", "samples_of", "training_scores"]


class RewardPool(Scorer, Protocol):
    """A :class:`~rewardhub.execution.Scorer` whose workers the run reports on: a
    :class:`rewardhub.distributed.RewardWorkerPool`, or a ``reward.remote``
    :class:`rewardhub.execution.remote.RemoteScorer` (none of its own: the server's URL as fingerprint)."""

    def fingerprint(self) -> str: ...
    def workers_info(self) -> list[dict[str, Any]]: ...
    def take_notes(self) -> list[str]: ...  # the lines noted since the last call (a hung worker's)

    @property
    def last_pids(self) -> Collection[int]: ...  # the processes that scored the last batch
    @property
    def restarts(self) -> int: ...
    @property
    def rescored_samples(self) -> int: ...


class RewardClient:
    """Scores rollouts on a :class:`rewardhub.distributed.RewardWorkerPool` (the reward workers).

    The pool's workers rebuild the registry from the ``reward:`` config and prove it by their
    fingerprint before scoring; a worker that dies mid-batch is restarted by the pool and its
    samples re-scored once. Scores and ``rewards/<term>/...`` metrics come from the execution engine.

    ``reference`` is the driver's :class:`rewardhub.distributed.WorkerSetup`: Ray places this actor
    on any node, whose installed distributions may not be the driver's, so the workers are checked
    against the driver's registry, never against this process's.
    """

    def __init__(self, reward_cfg: RewardConfig, *, num_workers: int = 1, max_restarts: int = 3,
                 num_cpus: float | None = None, num_gpus: float | None = None,
                 resources: Mapping[str, float] | None = None, batch_size: int | None = None,
                 reference: Any = None) -> None:
        from rewardhub.distributed import PoolSettings
        from rewardhub.errors import RewardhubError
        from rewardhub.scorers import open_scorer

        from .devices import NO_GPU_ENV

        # one chunk per worker and batch (groups kept whole): the fewest round trips
        chunk = math.ceil(batch_size / num_workers) if batch_size else None
        self.error: str | None = None
        self.pool: RewardPool
        try:  # reward.remote: a `rewardhub serve` server scores (no workers here); else reward workers
            settings = PoolSettings(num_workers=num_workers, num_cpus=num_cpus, num_gpus=num_gpus,
                                    resources=resources, max_restarts=max_restarts, chunk_size=chunk,
                                    runtime_env=NO_GPU_ENV)
            # lazy: a server is asked when the first batch comes, through its whole retry window
            self.pool = cast(RewardPool, open_scorer(reward_cfg, workers=settings, reference=reference,
                                                     lazy=True))
        except RewardhubError as exc:  # e.g. a worker's registry differs in a reward the config uses
            self.error = str(exc)
            return
        self.fingerprint = self.pool.fingerprint()

    def info(self) -> dict[str, Any]:
        """Where it runs; ``error`` when its reward workers could not start (the driver stops the run)."""
        if self.error is not None:
            return {"role": "reward_client", **process_location(), "error": self.error}
        from rewardhub.registry import builds_in_process

        return {"role": "reward_client", **process_location(), "registry_fingerprint": self.fingerprint,
                "registry_builds": builds_in_process()}

    def workers(self) -> list[dict[str, Any]]:
        """The pool's reward workers: role, node, pid, registry_fingerprint (and more)."""
        return [] if self.error is not None else self.pool.workers_info()

    def counters(self) -> dict[str, int]:
        return {"restarts": self.pool.restarts, "rescored_samples": self.pool.rescored_samples}

    def score(self, rollout: Rollout) -> Rollout:
        t0 = time.perf_counter()
        res = self.pool.score(samples_of(rollout))
        scores = training_scores(res)
        terms = [{k: reward_value(v) for k, v in dict(r).items()} for r in res.rewards]
        bounds = list(itertools.pairwise([0, *itertools.accumulate(len(g) for g in rollout.groups)]))
        rollout.rewards = [scores[a:b] for a, b in bounds]  # the groups' rows
        rollout.terms = [terms[a:b] for a, b in bounds]
        rollout.reward_metrics = {key: float(v) for key, v in dict(res.metrics).items()
                                  if isinstance(v, (int, float)) and not isinstance(v, bool)}
        from rewardhub.distributed import figure_metrics

        for figures in self.pool.pool_figures():  # reward_workers/<pool>/workers_now, queue waits, ...
            rollout.reward_metrics.update(figure_metrics(figures))
        rollout.reward_failures = failures(res)
        rollout.reward_metrics.update(error_rates(rollout.reward_failures))
        rollout.score_s = time.perf_counter() - t0
        rollout.reward_pids = sorted(self.pool.last_pids)
        rollout.reward_notes = self.pool.take_notes()
        return rollout

    def close(self) -> None:
        if self.error is None:
            self.pool.close()


def samples_of(rollout: Rollout) -> list[dict[str, Any]]:
    """The scoring samples of a rollout's completions; each a trajectory too (``messages``: the chat the
    model was given and its reply), for the rewards that read one."""
    samples = []
    for prompt, group in zip(rollout.batch.prompts, rollout.groups):
        for c in group:
            sample = {"prompt": prompt.text or prompt.question, "response": c.text,
                      "ground_truth": prompt.ground_truth, "data_source": prompt.data_source,
                      "extra_info": dict(prompt.extra_info)}
            if prompt.chat:
                sample["messages"] = [*prompt.chat, {"role": "assistant", "content": c.text}]
            samples.append(sample)
    return samples


def training_scores(res: Any) -> list[float]:
    """The reward each sample of a :class:`rewardhub.execution.ScoreResult` trains with: its score, or
    NaN (an invalid sample) where the score is none or not finite, or where a term failed and was dropped
    (:func:`~rewardhub_trainer.reward_failures.failed_without_value`)."""
    if not any(col.errors for col in res.columns.values()):  # no term failed: nothing was dropped
        return [reward_value(v) for v in res.scores]
    return [math.nan if failed_without_value(errs, terms) else reward_value(v)
            for v, errs, terms in zip(res.scores, res.errors, res.rewards)]
