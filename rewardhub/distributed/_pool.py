"""RewardWorkerPool: reward workers on a Ray resource pool, verified at start-up, healed when they die."""

from __future__ import annotations

import dataclasses
import logging
import math
from collections import Counter
from collections import deque
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
from ._errors import RegistryMismatchError
from ._errors import WorkerFailedError
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
                 reference: WorkerSetup | None = None, registry: Any = None) -> None:
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
                    split_models=False, reference=reference, registry=shared)
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
        results = self._dispatch(batch, chunks, list(terms) if terms else None, idx)
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

    def _dispatch(self, batch: list[dict[str, Any]], chunks: list[list[int]], terms: list[str] | None,
                  idx: list[int]) -> dict[int, dict[str, Any]]:
        ray = self._ray
        todo = deque(range(len(chunks)))
        done: dict[int, dict[str, Any]] = {}
        fails: Counter[int] = Counter()
        self.last_pids = set()
        pending: dict[Any, tuple[str, int, WorkerSlot, int]] = {
            s.starting: ("hello", -1, s, s.generation) for s in self._slots if s.starting is not None}
        while todo or any(kind == "score" for kind, *_ in pending.values()):
            while todo:
                slot = self._pick()
                if slot is None:
                    break
                cid = todo.popleft()
                rows = chunks[cid]
                ref = slot.actor.score.remote([batch[i] for i in rows], [idx[i] for i in rows], terms)
                slot.inflight += 1
                pending[ref] = ("score", cid, slot, slot.generation)
            if not pending:
                raise WorkerFailedError(f"every reward worker of pool {self.pool!r} is gone (after "
                                        f"{self.restarts} restarts); {len(todo)} chunks left unscored\n"
                                        "see the Ray logs of the workers for why they died", pool=self.pool)
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                kind, cid, slot, gen = pending.pop(ref)
                if kind == "hello":
                    info = self._hello(slot)
                    if info.get("problems") and slot.info is info:
                        raise RegistryMismatchError(self.pool, self.setup.driver_fingerprint, [info])
                    if not slot.alive:
                        self._died(slot, info["problems"][0]["detail"], pending)
                    continue
                if gen == slot.generation:
                    slot.inflight -= 1
                try:
                    res = ray.get(ref)
                except actor_errors() as exc:
                    fails[cid] += 1
                    if gen == slot.generation:
                        self._died(slot, short_error(exc), pending)
                    if fails[cid] >= self.max_attempts:
                        done[cid] = {"failed": f"reward workers died {fails[cid]} times scoring it "
                                               f"(last: {short_error(exc)})"}
                    else:
                        self.rescored_samples += len(chunks[cid])
                        todo.appendleft(cid)
                    continue
                except Exception as exc:
                    where = slot.info or {}
                    raise WorkerFailedError(
                        f"reward worker {slot.index} of pool {self.pool!r} on node {where.get('ip')} "
                        f"(node id {str(where.get('node_id'))[:12]}) failed: {exc}", pool=self.pool,
                        node_id=where.get("node_id")) from exc
                if cid not in done and isinstance(res.get("pid"), int):
                    self.last_pids.add(res["pid"])
                done.setdefault(cid, res)
        return done

    def _pick(self) -> WorkerSlot | None:
        slot, self._rr = pick_slot(self._slots, self.dispatch, self.max_inflight, self._rr)
        return slot

    def _died(self, slot: WorkerSlot, why: str, pending: dict[Any, tuple[str, int, WorkerSlot, int]]) -> None:
        where = slot.info or {}
        slot.alive, slot.inflight = False, 0
        if slot.restarts >= self.max_restarts:
            slot.gone = True
            log.error("reward worker %d of pool %r died (%s); out of restarts", slot.index, self.pool, why)
            return
        log.warning("reward worker %d of pool %r on node %s (pid %s) died: %s; restarting it", slot.index,
                    self.pool, where.get("ip"), where.get("pid"), why)
        try:
            self._ray.kill(slot.actor, no_restart=True)
        except Exception:  # noqa: BLE001 - already dead
            pass
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
