"""RewardWorkerPool: the trainer's reward backend -- one or two groups of reward workers on Ray."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from ..execution import Outcome
from ..execution import ScoreResult
from ..execution import TermFacts
from ..execution import aggregate
from ..execution import apply_on_failure_to_outcomes
from ..execution import check_aggregation
from ..execution import check_sample
from ._group import WorkerGroup
from ._placement import reward_model_terms
from ._placement import split_reward_models
from ._settings import PoolSettings
from ._setup import WorkerSetup
from ._setup import prepare_setup

__all__ = ["RewardWorkerPool"]


class RewardWorkerPool:
    """Reward workers (Ray actors) on a named pool, verified at start-up, healed when they die.

    With ``reward.reward_model.enable`` (and ``settings.split_models``), the reward-model terms get a
    :class:`WorkerGroup` of their own (from ``reward.reward_model``), the other terms one from
    ``reward.workers``; a config of reward-model terms only is one group, on the reward-model pool.

    :param reward_cfg: the ``reward:`` section (a RewardConfig, or raw: validated); ``reward.workers``
        gives the defaults of every setting.
    :param settings: how the workers run (:class:`PoolSettings`); ``options`` change single fields
        (``RewardWorkerPool(cfg, num_workers=2)``).
    :param reference: the :class:`WorkerSetup` the driver made (:func:`prepare_setup`), when this pool
        is built in another process (the trainer's reward client, an actor on any node): the workers
        are checked against the driver's registry, not this process's.
    :param registry: with ``reference``, the registry this process built already for a config whose terms
        include these: not built again.
    """

    cancels = False  # the workers score each chunk they were sent

    def __init__(self, reward_cfg: Any, settings: PoolSettings | None = None, *,
                 reference: WorkerSetup | None = None, registry: Any = None, **options: Any) -> None:
        self.settings = dataclasses.replace(settings or PoolSettings(), **options)
        plan = _plan(reward_cfg, self.settings, reference, registry)
        #: the groups, the reward-model one last; started in the reverse order (it may start the local
        #: Ray, which the one started first closes last)
        self.groups: list[Any] = []
        try:
            for setup, group_settings, _ in reversed(plan):
                self.groups.insert(0, _open_group(setup, group_settings))
        except BaseException:
            self.close()
            raise
        placed = [(i, t) for (_, _, positions), g in zip(plan, self.groups)
                  for i, t in zip(positions, g.terms)]
        #: every term, in the config's order
        self.terms = [t for _, t in sorted(placed, key=lambda p: p[0])]
        self._group_of = {t.name: g for g in self.groups for t in g.terms}
        self.setup: WorkerSetup = self.groups[0].setup
        self.pool = self.groups[0].pool
        self.aggregation = self.setup.reward_cfg.aggregation
        check_aggregation(self.aggregation)
        #: pids of the workers that scored the last batch
        self.last_pids: set[int] = set()

    @property
    def restarts(self) -> int:
        return sum(g.restarts for g in self.groups)

    @property
    def rescored_samples(self) -> int:
        return sum(g.rescored_samples for g in self.groups)

    def pools(self) -> list[Any]:
        """The groups: the reward workers, and the reward-model workers when they have their own."""
        return list(self.groups)

    @property
    def facts(self) -> tuple[TermFacts, ...]:
        """Each term as callers see it, in the config's order (the workers' facts)."""
        by_name = {f.name: f for g in self.groups for f in g.facts}
        return tuple(by_name[t.name] for t in self.terms if t.name in by_name)

    def provenance(self) -> list[dict[str, Any]]:
        """Each term's reward as the workers that run it have it, and those workers."""
        workers = self.workers_info()
        out = []
        for f in self.facts:
            mine = [w for w in workers if w.get("pool") == self._group_of[f.name].pool]
            own = next(((w.get("rewards") or {}).get(f.reward) for w in mine if w.get("rewards")), None) or {}
            out.append({"name": f.name, "reward": f.reward, **own, "executor": "ray",
                        "workers": [{**{k: w.get(k) for k in ("pool", "node", "pid", "registry_fingerprint")},
                                     **(w.get("rewards") or {}).get(f.reward, {})} for w in mine]})
        return out

    def score(self, samples: Sequence[Mapping[str, Any]], progress: Callable[[int, int], None] | None = None,
              *, indices: Sequence[int] | None = None, defer_raise: bool = False,
              cancel: Any = None) -> ScoreResult:
        """Score a batch on the workers: one row per sample, in input order, each scored once (see
        :meth:`rewardhub.execution.Scorer.score`)."""
        idx = list(indices) if indices is not None else list(range(len(samples)))
        batch = [check_sample(s, i) for i, s in zip(idx, samples)]
        outcomes = self.score_outcomes(batch, indices=idx)
        for term in self.terms:
            policy = "nan" if defer_raise and term.on_failure == "raise" else term.on_failure
            apply_on_failure_to_outcomes(term.name, policy, outcomes[term.name])
        res = aggregate([(t.name, t.weight) for t in self.terms], self.aggregation, outcomes, len(batch))
        for group in self.groups:
            res.metrics[f"reward_workers/{group.pool}/restarts"] = float(group.restarts)
            res.metrics[f"reward_workers/{group.pool}/rescored_samples"] = float(group.rescored_samples)
            group.saw_workers()
            res.metrics.update(group.figures.metrics())
        if progress is not None:
            progress(len(batch), len(batch))
        return res

    def score_outcomes(self, samples: Sequence[Mapping[str, Any]], terms: Sequence[str] | None = None,
                       indices: Sequence[int] | None = None) -> dict[str, list[Outcome]]:
        """Each term's raw outcomes (``on_failure`` not applied), per sample in input order."""
        batch = list(samples)
        names = list(terms) if terms else [t.name for t in self.terms]
        idx = list(indices) if indices is not None else list(range(len(batch)))
        whole = not terms and len(self.groups) == 1
        out: dict[str, list[Outcome]] = {}
        pids: set[int] = set()
        for group in self.groups:
            mine = [n for n in names if self._group_of.get(n, self.groups[0]) is group]
            if mine:
                out.update(group.score_outcomes(batch, mine, idx, all_terms=whole))
                pids |= group.last_pids
        self.last_pids = pids
        return {n: out[n] for n in names}

    def pool_figures(self) -> list[dict[str, Any]]:
        """Each group's figures: workers (min, max, now), queue wait p50/p99, calls re-dispatched,
        replicas replaced (``--summary-json``'s ``pools``)."""
        return [g.pool_figures() for g in self.groups]

    def take_notes(self) -> list[str]:
        """The lines noted since the last call (a hung worker's), of every group."""
        return [line for g in self.groups for line in g.take_notes()]

    def workers_info(self) -> list[dict[str, Any]]:
        """One dict per worker: role, pool, index, node, ip, pid, registry_fingerprint, restarts, rewards
        (its own)."""
        return [facts for g in self.groups for facts in g.workers_info()]

    def fingerprint(self) -> str:
        return self.setup.driver_fingerprint

    def close(self) -> None:
        """Stop the workers (and the local Ray, when a group started it: that one is closed last)."""
        groups = getattr(self, "groups", [])  # kept: their counters stay readable after close
        try:
            for group in groups[:-1]:
                group.close()
        finally:
            if groups:
                groups[-1].close()

    def __enter__(self) -> RewardWorkerPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _open_group(setup: WorkerSetup, s: PoolSettings) -> Any:
    """A fixed :class:`WorkerGroup`, or an :class:`~._autoscale.AutoscaleGroup` when the pool autoscales."""
    if s.autoscale is None and setup.reward_cfg.workers.autoscale is None:
        return WorkerGroup(setup, s)
    from ._autoscale import AutoscaleGroup

    return AutoscaleGroup(setup, s)


def _plan(reward_cfg: Any, s: PoolSettings, reference: WorkerSetup | None,
          registry: Any) -> list[tuple[WorkerSetup, PoolSettings, list[int]]]:
    """The groups to start: (setup, settings, the positions of its terms in the config), the
    reward-model group (when split off) last."""
    setup, registry = prepare_setup(reward_cfg, pool=s.pool, ship_files=s.ship_files, strict=s.strict,
                                    reference=reference, registry=registry if reference is not None else None)
    cfg = setup.reward_cfg
    rm_idx = reward_model_terms(cfg, registry) if s.split_models else []
    if not rm_idx:
        return [(setup, s, list(range(len(cfg.rewards))))]
    # with the driver's values from reference, this registry only resolves names: the parts reuse it
    # (without reference, each part's fingerprint is its own registry's)
    shared = registry if reference is not None else None
    rm_cfg, rest, opts = split_reward_models(cfg, rm_idx)
    rm_settings = s.for_reward_models(opts)

    def part(part_cfg: Any, pool: str | None) -> WorkerSetup:
        return prepare_setup(part_cfg, pool=pool, ship_files=s.ship_files, strict=s.strict,
                             reference=reference, registry=shared)[0]

    if not rest:  # only reward-model terms: their group is the only one
        only = dataclasses.replace(s, num_workers=opts["num_workers"], num_cpus=opts["num_cpus"],
                                   num_gpus=opts["num_gpus"])
        return [(part(dataclasses.replace(cfg, workers=rm_cfg.workers), None), only, list(rm_idx))]
    others = [i for i in range(len(cfg.rewards)) if i not in rm_idx]
    return [(part(dataclasses.replace(cfg, rewards=rest), s.pool), s, others),
            (part(rm_cfg, None), rm_settings, list(rm_idx))]
