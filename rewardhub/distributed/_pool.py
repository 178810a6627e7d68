"""RewardWorkerPool: reward workers on a Ray resource pool, verified at start-up, healed when they die."""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from ..errors import UsageError
from ..execution import ERROR
from ..execution import Outcome
from ..execution import ScoreResult
from ..execution import aggregate
from ..execution import apply_on_failure_to_outcomes
from ..execution import check_aggregation
from ..execution import check_sample
from ._chunks import WorkerTerm
from ._chunks import make_chunks
from ._dispatch import call_bound
from ._dispatch import dispatch
from ._errors import RegistryMismatchError
from ._placement import reward_model_terms
from ._placement import split_reward_models
from ._ray import actor_errors
from ._ray import ensure_ray
from ._ray import short_error
from ._reward_worker import RewardWorker
from ._setup import WorkerSetup
from ._setup import prepare_setup
from ._slots import WorkerSlot
from ._slots import pick_slot
from ._slots import slot_facts
from ._startup import check_placeable
from ._startup import warn_unused_differences

__all__ = ["RewardWorkerPool"]

log = logging.getLogger("rewardhub.distributed")

_actor_cls: Any = None


class RewardWorkerPool:
    """``num_workers`` reward workers (Ray actors) on a named pool; the trainer's reward backend.

    Every worker builds the registry from the same sources as the driver and proves it by its
    fingerprint before any scoring; any difference in a reward the config uses raises
    :class:`RegistryMismatchError` naming the reward, the node, the pool and the difference.

    :param reward_cfg: the ``reward:`` section (a RewardConfig, or raw: validated); ``reward.workers``
        gives the defaults of every option below.
    :param resources: custom Ray resources each worker needs (placement on a pool of nodes).
    :param dispatch: ``least_loaded`` (default) or ``round_robin``.
    :param runtime_env: a Ray runtime_env for the workers.
    :param ship_files: send reward files' bytes to the workers (else a node must have the file).
    :param strict: any registry difference is fatal, not only in the rewards the config uses.
    :param max_restarts: restarts per worker slot; a dead worker's in-flight samples are re-scored.
    :param call_timeout_s: seconds one score call (a chunk) may take before its worker counts as hung
        and is restarted (default ``reward.workers.call_timeout_s``, else derived from the terms'
        ``timeout_s``: :func:`~rewardhub.distributed._dispatch.call_bound`).
    :param split_models: with ``reward.reward_model.enable``, reward-model terms (capability
        ``reward_model``, executor unset or ``ray``) get a pool of their own, from
        ``reward.reward_model`` (see :func:`~rewardhub.distributed._placement.reward_model_pool`); this
        pool then scores the other terms, or is that pool itself when there are none.
    :param reference: the :class:`WorkerSetup` the driver made (:func:`prepare_setup`), when this pool
        is built in another process (the trainer's reward client, an actor on any node): the workers
        are checked against the driver's registry, not this process's.
    :param registry: with ``reference``, the registry this process built already for a config whose terms
        include these (the reward-model pool of a split): not built again.
    """

    def __init__(self, reward_cfg: Any, *, num_workers: int | None = None, pool: str | None = None,
                 resources: Mapping[str, float] | None = None, num_cpus: float | None = None,
                 num_gpus: float | None = None, dispatch: str | None = None, address: str | None = None,
                 runtime_env: Mapping[str, Any] | None = None, ship_files: bool = True, strict: bool = False,
                 max_restarts: int = 3, max_attempts: int = 3, chunk_size: int | None = None,
                 max_inflight: int = 2, start_timeout_s: float = 300.0, split_models: bool = True,
                 reference: WorkerSetup | None = None, registry: Any = None,
                 call_timeout_s: float | None = None) -> None:
        self.setup, registry = prepare_setup(reward_cfg, pool=pool, ship_files=ship_files, strict=strict,
                                             reference=reference,
                                             registry=registry if reference is not None else None)
        # with the driver's values from reference, this registry only resolves names: the split's parts
        # reuse it (without reference, each part's fingerprint is its own registry's)
        shared = registry if reference is not None else None
        #: the reward-model pool, when this one scores other terms too
        self.sub: RewardWorkerPool | None = None
        positions = list(range(len(self.setup.reward_cfg.rewards)))  # of this pool's terms
        rm_idx = reward_model_terms(self.setup.reward_cfg, registry) if split_models else []
        if rm_idx:
            cfg = self.setup.reward_cfg
            rm_cfg, rest, opts = split_reward_models(cfg, rm_idx)
            if rest:
                self.sub = RewardWorkerPool(
                    rm_cfg,
                    runtime_env=runtime_env, ship_files=ship_files, strict=strict, max_restarts=max_restarts,
                    max_attempts=max_attempts, max_inflight=max_inflight, start_timeout_s=start_timeout_s,
                    split_models=False, reference=reference, registry=shared, call_timeout_s=call_timeout_s)
                positions = [i for i in positions if i not in rm_idx]
                self.setup, _ = prepare_setup(dataclasses.replace(cfg, rewards=rest), pool=pool,
                                              ship_files=ship_files, strict=strict, reference=reference,
                                              registry=shared)
            else:  # only reward-model terms: this is their pool
                self.setup, _ = prepare_setup(dataclasses.replace(cfg, workers=rm_cfg.workers),
                                              ship_files=ship_files, strict=strict, reference=reference,
                                              registry=shared)
                num_workers, num_cpus, num_gpus = opts["num_workers"], opts["num_cpus"], opts["num_gpus"]
        w = self.setup.reward_cfg.workers
        self.pool = self.setup.pool
        self.num_workers = int(num_workers if num_workers is not None else w.num_workers or 0)
        if self.num_workers < 1:
            raise UsageError(f"reward worker pool {self.pool!r} needs num_workers >= 1, got "
                             f"{self.num_workers}\nset reward.workers.num_workers (0 means: score in-process "
                             "with a Runner)")
        self.dispatch = dispatch or w.dispatch or "least_loaded"
        from ..config.schema import CHOICES  # the validator's table of allowed values

        allowed = CHOICES["workers.dispatch"]  # how work is handed to workers
        if self.dispatch not in allowed:
            raise UsageError(f"dispatch={self.dispatch!r} is not valid\nallowed: {', '.join(allowed)}")
        self.resources = {str(k): float(v) for k, v in dict(resources if resources is not None
                                                              else w.resources).items()}
        self.num_cpus = float(num_cpus if num_cpus is not None else w.num_cpus)
        self.num_gpus = float(num_gpus if num_gpus is not None else w.num_gpus)
        self.runtime_env = dict(runtime_env) if runtime_env else None
        self.max_restarts, self.max_attempts = max_restarts, max(1, max_attempts)
        self.chunk_size, self.max_inflight = chunk_size, max(1, max_inflight)
        self.restarts = 0
        self.rescored_samples = 0
        #: seconds one score call may take (None: from the terms' timeouts: :meth:`call_bound`)
        self.call_timeout_s = call_timeout_s if call_timeout_s is not None else w.call_timeout_s
        self.notes: list[str] = []  #: lines for the user since :meth:`take_notes` (a hung worker's)
        #: pids of the workers that scored the last batch (a killed worker's re-scored chunk counts once)
        self.last_pids: set[int] = set()
        self._rr = 0
        self._ray, self._started_ray = ensure_ray(address or w.address)
        check_placeable(self._ray, self._needs(), self.pool)
        self._setup_ref = self._ray.put(self.setup)
        self._slots = [WorkerSlot(i) for i in range(self.num_workers)]
        try:
            self._start_all(start_timeout_s)
        except BaseException:
            self.close()
            raise
        info = self._slots[0].info or {}
        self.terms = [WorkerTerm(t["name"], t["reward"], float(t["weight"]), t["on_failure"])
                      for t in info.get("terms", [])]
        self._own = [t.name for t in self.terms]
        self._kinds = {t["name"]: t["kind"] for t in info.get("terms", [])}
        if self.sub is not None:  # every term, in the config's order
            placed = list(zip(positions, self.terms)) + list(zip(rm_idx, self.sub.terms))
            self.terms = [t for _, t in sorted(placed, key=lambda p: p[0])]
        self.aggregation = self.setup.reward_cfg.aggregation
        check_aggregation(self.aggregation)

    # ---- start-up ----------------------------------------------------------------------
    def _needs(self) -> dict[str, float]:
        needs = {"CPU": self.num_cpus, "GPU": self.num_gpus, **self.resources}
        return {k: v for k, v in needs.items() if v > 0}

    def _new_actor(self, slot: WorkerSlot) -> None:
        global _actor_cls
        if _actor_cls is None:
            _actor_cls = self._ray.remote(RewardWorker)
        opts: dict[str, Any] = {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus, "max_restarts": 0,
                                "name": None}
        if self.resources:
            opts["resources"] = self.resources
        if self.runtime_env:
            opts["runtime_env"] = self.runtime_env
        slot.actor = _actor_cls.options(**opts).remote(self._setup_ref, slot.index)
        slot.starting = slot.actor.hello.remote()
        slot.alive = False

    def _start_all(self, timeout_s: float) -> None:
        for slot in self._slots:
            self._new_actor(slot)
        refs = [s.starting for s in self._slots]
        ready, _ = self._ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
        infos: list[dict[str, Any]] = []
        for slot in self._slots:
            if slot.starting not in ready:
                infos.append({"pool": self.pool, "index": slot.index, "problems": [{
                    "kind": "error", "detail": f"did not start within {timeout_s:g}s (needs {self._needs()}; "
                                               "is the cluster big enough for num_workers?)"}]})
                continue
            infos.append(self._hello(slot))
        if any(i.get("problems") for i in infos):
            raise RegistryMismatchError(self.pool, self.setup.driver_fingerprint, infos)
        warn_unused_differences(infos, self.pool)

    def _hello(self, slot: WorkerSlot) -> dict[str, Any]:
        """Collect a (re)started worker's hello(); a worker without problems becomes alive."""
        ref, slot.starting = slot.starting, None
        try:
            info: dict[str, Any] = self._ray.get(ref)
        except actor_errors() as exc:
            return {"pool": self.pool, "index": slot.index,
                    "problems": [{"kind": "error", "detail": f"died while starting: {short_error(exc)}"}]}
        slot.info = info
        slot.alive = not info.get("problems")
        return info

    # ---- scoring -----------------------------------------------------------------------
    def score(self, samples: Sequence[Mapping[str, Any]]) -> ScoreResult:
        """Score a batch on the workers: one row per sample, in input order, each scored once."""
        batch = [check_sample(s, i) for i, s in enumerate(samples)]
        outcomes = self.score_outcomes(batch)
        for term in self.terms:
            apply_on_failure_to_outcomes(term.name, term.on_failure, outcomes[term.name])
        res = aggregate([(t.name, t.weight) for t in self.terms], self.aggregation, outcomes, len(batch))
        for pool in self.pools():
            res.metrics[f"reward_workers/{pool.pool}/restarts"] = float(pool.restarts)
            res.metrics[f"reward_workers/{pool.pool}/rescored_samples"] = float(pool.rescored_samples)
        return res

    def pools(self) -> list[RewardWorkerPool]:
        """This pool, and the reward-model pool when it has one."""
        return [self] if self.sub is None else [self, self.sub]

    def score_outcomes(self, samples: Sequence[Mapping[str, Any]], terms: Sequence[str] | None = None,
                       indices: Sequence[int] | None = None) -> dict[str, list[Outcome]]:
        """Each term's raw outcomes (``on_failure`` not applied), per sample in input order."""
        batch = list(samples)
        names = list(terms) if terms else [t.name for t in self.terms]
        idx = list(indices) if indices is not None else list(range(len(batch)))
        if self.sub is not None:
            theirs = [n for n in names if n not in self._own]
            mine = [n for n in names if n in self._own]
            out = self._score_own(batch, mine, idx) if mine else {}
            pids = set(self.last_pids) if mine else set()
            if theirs:
                out.update(self.sub.score_outcomes(batch, theirs, idx))
                pids |= self.sub.last_pids
            self.last_pids = pids
            return {n: out[n] for n in names}
        return self._score_own(batch, names, idx, all_terms=not terms)

    def _score_own(self, batch: list[Any], names: list[str], idx: list[int],
                   all_terms: bool = False) -> dict[str, list[Outcome]]:
        terms = None if all_terms else names
        groups = any(self._kinds.get(n) == "group" for n in names)
        size = self.chunk_size or max(1, math.ceil(len(batch) / (4 * self.num_workers)))
        chunks = make_chunks(batch, size, groups)
        results = dispatch(self, batch, chunks, list(terms) if terms else None, idx)
        out = {n: [Outcome(None)] * len(batch) for n in names}
        for cid, chunk in enumerate(chunks):
            res = results[cid]
            for n in names:
                if "failed" in res:
                    for i in chunk:
                        out[n][i] = Outcome(None, ERROR,
                                            error=f"reward {n!r} on sample {idx[i]}: {res['failed']}")
                    continue
                for i, wire in zip(chunk, res["outcomes"][n]):
                    out[n][i] = Outcome.from_wire(wire)
        return out

    def _pick(self) -> WorkerSlot | None:
        slot, self._rr = pick_slot(self._slots, self.dispatch, self.max_inflight, self._rr)
        return slot

    def call_bound(self, rows: int, terms: Sequence[str] | None) -> float | None:
        """Seconds a score call of ``rows`` samples (of ``terms``; None: every term) may take
        (:func:`~rewardhub.distributed._dispatch.call_bound`)."""
        info = [t for t in (self._slots[0].info or {}).get("terms", []) if not terms or t["name"] in terms]
        return call_bound(info, rows, self.call_timeout_s)

    def hung(self, slot: WorkerSlot, rows: int, terms: Sequence[str] | None) -> str:
        """A score call of ``rows`` samples on ``slot`` passed its bound: why the worker is restarted (its
        death path does that)."""
        bound = self.call_bound(rows, terms)
        names = ", ".join(repr(n) for n in (terms or self._own)) or "its rewards"
        where = slot.info or {}
        why = (f"did not answer a chunk of {rows} samples within {bound or 0:g}s (reward {names}; "
               "reward.workers.call_timeout_s, else the rewards' timeout_s x the samples)")
        self.note(f"reward worker {slot.index} of pool {self.pool!r} on node {where.get('ip')} "
                  f"(pid {where.get('pid')}) {why}: killed, restarted, its chunk re-scored")
        return why

    def note(self, line: str) -> None:
        """A line the user must see: logged, and kept for the caller that shows them (:meth:`take_notes`)."""
        log.warning("%s", line)
        self.notes.append(line)

    def take_notes(self) -> list[str]:
        """The lines noted since the last call (the reward-model pool's too)."""
        out, self.notes = self.notes, []
        return out + (self.sub.take_notes() if self.sub is not None else [])

    def _died(self, slot: WorkerSlot, why: str, pending: dict[Any, tuple[str, int, WorkerSlot, int]]) -> None:
        where = slot.info or {}
        slot.alive, slot.inflight = False, 0
        try:  # dead, or hung (a stopped process, a stuck kernel): it must not come back on its own
            self._ray.kill(slot.actor, no_restart=True)
        except Exception:  # noqa: BLE001 - already dead
            pass
        if slot.restarts >= self.max_restarts:
            slot.gone = True
            log.error("reward worker %d of pool %r died (%s); out of restarts", slot.index, self.pool, why)
            return
        log.warning("reward worker %d of pool %r on node %s (pid %s) died: %s; restarting it", slot.index,
                    self.pool, where.get("ip"), where.get("pid"), why)
        slot.restarts += 1
        slot.generation += 1
        self.restarts += 1
        self._new_actor(slot)
        pending[slot.starting] = ("hello", -1, slot, slot.generation)

    # ---- facts and lifetime --------------------------------------------------------------
    def workers_info(self) -> list[dict[str, Any]]:
        """One dict per worker: role, pool, index, node, ip, pid, registry_fingerprint, restarts, rewards (its
        own)."""
        out = []
        for slot in self._slots:
            if slot.starting is not None:
                self._hello(slot)
            out.append(slot_facts(slot, self.pool))
        return out + (self.sub.workers_info() if self.sub is not None else [])

    def fingerprint(self) -> str:
        return self.setup.driver_fingerprint

    def close(self) -> None:
        """Stop the workers (and the local Ray, when this pool started it)."""
        sub, self.sub = getattr(self, "sub", None), None
        if sub is not None:  # it started first, so it may own the local Ray: closed last
            try:
                self._close_own()
            finally:
                sub.close()
            return
        self._close_own()

    def _close_own(self) -> None:
        for slot in getattr(self, "_slots", []):
            if slot.actor is not None:
                try:
                    self._ray.kill(slot.actor, no_restart=True)
                except Exception:  # noqa: BLE001
                    pass
                slot.actor, slot.alive, slot.starting = None, False, None
        if getattr(self, "_started_ray", False):
            self._ray.shutdown()
            self._started_ray = False

    def __enter__(self) -> RewardWorkerPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
