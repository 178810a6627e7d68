"""WorkerGroup: the reward workers of one Ray pool, verified at start-up, healed when they die."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import sys
import time
from collections.abc import Sequence
from typing import Any

from ..errors import UsageError
from ..execution import Outcome
from ..execution import TermFacts
from ._chunks import WorkerTerm
from ._chunks import make_chunks
from ._dispatch import call_bound
from ._dispatch import dispatch
from ._dispatch import outcomes_of
from ._errors import RegistryMismatchError
from ._figures import PoolFigures
from ._ray import actor_errors
from ._ray import ensure_ray
from ._ray import short_error
from ._reward_worker import RewardWorker
from ._settings import PoolSettings
from ._setup import WorkerSetup
from ._slots import WorkerSlot
from ._slots import slot_facts
from ._startup import check_placeable
from ._startup import warn_unused_differences

__all__ = ["PoolGroup", "WorkerGroup"]

log = logging.getLogger("rewardhub.distributed")

_actor_cls: Any = None


class PoolGroup:
    """What a fixed :class:`WorkerGroup` and an autoscaling group
    (:class:`~rewardhub.distributed._autoscale.AutoscaleGroup`) share: the pool's settings, figures and
    notes, and the terms its workers report."""

    def __init__(self, setup: WorkerSetup, settings: PoolSettings, num_workers: int) -> None:
        s, w = settings, setup.reward_cfg.workers
        self.setup, self.pool, self.num_workers = setup, setup.pool, num_workers
        self.resources = {str(k): float(v) for k, v in dict(s.resources if s.resources is not None
                                                              else w.resources).items()}
        self.num_cpus = float(s.num_cpus if s.num_cpus is not None else w.num_cpus)
        self.num_gpus = float(s.num_gpus if s.num_gpus is not None else w.num_gpus)
        self.runtime_env = dict(s.runtime_env) if s.runtime_env else None
        self.max_attempts, self.max_inflight = max(1, s.max_attempts), max(1, s.max_inflight)
        self.chunk_size = s.chunk_size
        #: seconds one score call may take (None: from the terms' timeouts: :meth:`call_bound`)
        self.call_timeout_s = s.call_timeout_s if s.call_timeout_s is not None else w.call_timeout_s
        self.restarts = 0
        self.rescored_samples = 0
        self.figures = PoolFigures(setup.pool, num_workers)
        self.notes: list[str] = []  #: lines for the user since :meth:`take_notes` (a hung worker's)
        #: pids of the workers that scored the last batch (a killed worker's re-scored chunk counts once)
        self.last_pids: set[int] = set()
        self._terms_info: list[dict[str, Any]] = []
        self._ray, self._started_ray = ensure_ray(s.address or w.address)

    def _take_terms(self, terms_info: list[dict[str, Any]]) -> None:
        """The terms as a started worker reported them (its hello())."""
        self._terms_info = list(terms_info)
        self.terms = [WorkerTerm(t["name"], t["reward"], float(t["weight"]), t["on_failure"])
                      for t in self._terms_info]
        #: each term as callers see it (the worker's own facts, run on Ray)
        self.facts = [TermFacts.from_dict({**t, "executor": "ray"}) for t in self._terms_info]
        #: terms whose chunks keep a prompt's group whole: group rewards, and those with cache on (the
        #: identical completions of a group meet on one worker, and make one call)
        self._whole = {t["name"] for t in self._terms_info if t["kind"] == "group" or t.get("cache")}

    def _needs(self) -> dict[str, float]:
        needs = {"CPU": self.num_cpus, "GPU": self.num_gpus, **self.resources}
        return {k: v for k, v in needs.items() if v > 0}

    def _actor_options(self) -> dict[str, Any]:
        """The Ray options of one worker's actor: what it needs, and where it runs."""
        opts: dict[str, Any] = {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus}
        if self.resources:
            opts["resources"] = self.resources
        if self.runtime_env:
            opts["runtime_env"] = self.runtime_env
        return opts

    def call_bound(self, rows: int, terms: Sequence[str] | None) -> float | None:
        """Seconds a score call of ``rows`` samples (of ``terms``; None: every term) may take
        (:func:`~rewardhub.distributed._dispatch.call_bound`)."""
        info = [t for t in self._terms_info if not terms or t["name"] in terms]
        return call_bound(info, rows, self.call_timeout_s)

    def note(self, line: str) -> None:
        """A line the user must see: logged, and kept for the caller that shows them (:meth:`take_notes`)."""
        log.warning("%s", line)
        self.notes.append(line)

    def take_notes(self) -> list[str]:
        """The lines noted since the last call."""
        out, self.notes = self.notes, []
        return out

    def _stop_ray(self) -> None:
        """Shut Ray down, when this group started it."""
        if getattr(self, "_started_ray", False):
            self._ray.shutdown()
            self._started_ray = False


class WorkerGroup(PoolGroup):
    """``num_workers`` reward workers (Ray actors) on one named pool, scoring the terms of ``setup``.

    Every worker builds the registry from the same sources as the driver and proves it by its
    fingerprint before any scoring; any difference in a reward the config uses raises
    :class:`RegistryMismatchError` naming the reward, the node, the pool and the difference.
    """

    def __init__(self, setup: WorkerSetup, settings: PoolSettings) -> None:
        s, w = settings, setup.reward_cfg.workers
        pool = setup.pool
        num_workers = int(s.num_workers if s.num_workers is not None else w.num_workers or 0)
        if num_workers < 1:
            raise UsageError(f"reward worker pool {pool!r} needs num_workers >= 1, got "
                             f"{num_workers}\nset reward.workers.num_workers (0 means: score in-process "
                             "with a Runner)")
        self.dispatch = s.dispatch or w.dispatch or "least_loaded"
        from ..config.schema import CHOICES  # the validator's table of allowed values

        allowed = CHOICES["workers.dispatch"]  # how work is handed to workers
        if self.dispatch not in allowed:
            raise UsageError(f"dispatch={self.dispatch!r} is not valid\nallowed: {', '.join(allowed)}")
        super().__init__(setup, settings, num_workers)
        self.max_restarts = s.max_restarts
        #: seconds a restarted worker may wait for Ray to place it; then the pool goes on without it
        self.replace_timeout_s = float(s.replace_timeout_s if s.replace_timeout_s is not None
                                       else w.replace_timeout_s)
        self._rr = 0
        check_placeable(self._ray, self._needs(), self.pool)
        from ._fleetcache import store_name

        # the store is started below, once a worker says a term has cache on
        store = store_name(s.cache_dir) if s.fleet_cache else None
        self.setup = dataclasses.replace(setup, cache_store=store)
        self._setup_ref = self._ray.put(self.setup)
        self._slots = [WorkerSlot(i) for i in range(self.num_workers)]
        try:
            self._start_all(s.start_timeout_s)
        except BaseException:
            self.close()
            raise
        self._take_terms((self._slots[0].info or {}).get("terms", []))
        #: the cache every worker of the pool shares (:mod:`._fleetcache`), when a term has cache on
        self.cache_store: Any = None
        self._cache_dir = s.cache_dir
        if self.setup.cache_store and any(t.get("cache") for t in self._terms_info):
            from ._fleetcache import start_store

            try:  # up and answering, else none: each worker keeps its own cache
                self.cache_store = start_store(self._ray, self.setup.cache_store, s.cache_dir)
                self._ray.get(self.cache_store.info.remote(), timeout=120)
            except Exception as exc:  # noqa: BLE001 - the pool scores on without it
                self.cache_store = None
                self.note(f"the reward cache of pool {self.pool!r} could not start ({short_error(exc)}); "
                          "each worker keeps its own in memory")

    # ---- start-up ----------------------------------------------------------------------
    def _new_actor(self, slot: WorkerSlot) -> None:
        global _actor_cls
        if _actor_cls is None:
            _actor_cls = self._ray.remote(RewardWorker)
        opts = {**self._actor_options(), "max_restarts": 0, "name": None}
        slot.actor = _actor_cls.options(**opts).remote(self._setup_ref, slot.index)
        slot.starting = slot.actor.hello.remote()
        slot.starting_since = time.monotonic()
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
    def score_outcomes(self, batch: list[Any], names: list[str], idx: list[int],
                       all_terms: bool = False) -> dict[str, list[Outcome]]:
        """Raw outcomes of this group's terms ``names`` (``all_terms``: every one of them) per sample."""
        terms = None if all_terms else names
        groups = any(n in self._whole for n in names)
        size = self.chunk_size or max(1, math.ceil(len(batch) / (4 * self.num_workers)))
        chunks = make_chunks(batch, size, groups)
        results = dispatch(self, batch, chunks, list(terms) if terms else None, idx)
        return outcomes_of(len(batch), names, chunks, [results[c] for c in range(len(chunks))], idx)

    def hung(self, slot: WorkerSlot, rows: int, terms: Sequence[str] | None) -> str:
        """A score call of ``rows`` samples on ``slot`` passed its bound: why the worker is restarted (its
        death path does that)."""
        bound = self.call_bound(rows, terms)
        names = ", ".join(repr(n) for n in (terms or [t.name for t in self.terms])) or "its rewards"
        where = slot.info or {}
        why = (f"did not answer a chunk of {rows} samples within {bound or 0:g}s (reward {names}; "
               "reward.workers.call_timeout_s, else the rewards' timeout_s x the samples)")
        self.note(f"reward worker {slot.index} of pool {self.pool!r} on node {where.get('ip')} "
                  f"(pid {where.get('pid')}) {why}: killed, restarted, its chunk re-scored")
        return why

    def _died(self, slot: WorkerSlot, why: str, pending: dict[Any, tuple[str, int, WorkerSlot, int]]) -> None:
        where = slot.info or {}
        slot.alive, slot.inflight = False, 0
        self._kill(slot.actor)  # dead, or hung (a stopped process, a stuck kernel): it must not come back
        if slot.restarts >= self.max_restarts:
            slot.gone = True
            log.error("reward worker %d of pool %r died (%s); out of restarts", slot.index, self.pool, why)
            return
        log.warning("reward worker %d of pool %r on node %s (pid %s) died: %s; restarting it", slot.index,
                    self.pool, where.get("ip"), where.get("pid"), why)
        slot.restarts += 1
        slot.generation += 1
        self.restarts += 1
        self.figures.replaced += 1
        self._new_actor(slot)
        pending[slot.starting] = ("hello", -1, slot, slot.generation)

    def _kill(self, actor: Any) -> None:
        """Stop ``actor`` for good (one that is gone already, or Ray shut down: nothing to do)."""
        with contextlib.suppress(Exception):
            self._ray.kill(actor, no_restart=True)

    def start_deadline(self, slot: WorkerSlot) -> float:
        """When a (re)started worker that Ray has not placed yet is given up (:meth:`unplaceable`)."""
        return slot.starting_since + self.replace_timeout_s

    def unplaceable(self, slot: WorkerSlot, at_close: bool = False) -> None:
        """A restarted worker Ray could not place within ``replace_timeout_s`` (its node is gone and no
        other has room), or by the time the pool closes: dropped, with one line, and the pool goes on
        with the workers it has."""
        waited = time.monotonic() - slot.starting_since
        self._kill(slot.actor)  # its pending creation too
        slot.actor, slot.starting, slot.alive, slot.gone, slot.inflight = None, None, False, True, 0
        left = sum(not s.gone for s in self._slots)
        if at_close:  # maybe only slow to start: said as what is known
            line = (f"reward worker {slot.index} of pool {self.pool!r} was not placed again by Ray in the "
                    f"{waited:.0f}s to the end of the run (each worker needs {self._needs()}); the run "
                    f"finished with {left} of {self.num_workers} workers")
        else:
            line = (f"reward worker {slot.index} of pool {self.pool!r} cannot be placed again: Ray found no "
                    f"node with room for it within {self.replace_timeout_s:g}s "
                    f"(reward.workers.replace_timeout_s); each worker needs {self._needs()}; going on with "
                    f"{left} of {self.num_workers} workers")
        print(f"WARNING: {line}", file=sys.stderr, flush=True)
        self.notes.append(line)
        self.saw_workers()

    def saw_workers(self) -> None:
        """Count the live workers into the pool's figures."""
        self.figures.saw_workers(sum(s.alive for s in self._slots))

    def pool_figures(self) -> dict[str, object]:
        """This pool's figures (:class:`~rewardhub.distributed._figures.PoolFigures`), as
        ``--summary-json`` writes them."""
        self.saw_workers()
        return self.figures.as_dict()

    # ---- facts and lifetime --------------------------------------------------------------
    def workers_info(self) -> list[dict[str, Any]]:
        """One dict per worker: role, pool, index, node, ip, pid, registry_fingerprint, restarts, rewards (its
        own)."""
        out = []
        for slot in self._slots:
            self._settle(slot)
            out.append(slot_facts(slot, self.pool))
        return out

    def _settle(self, slot: WorkerSlot) -> None:
        """Wait for a restarted worker's hello, up to its start deadline: one that died while starting
        (placed on a node on its way out) is restarted again, within ``max_restarts``; one Ray could not
        place is dropped (:meth:`unplaceable`)."""
        while slot.starting is not None:
            if not self._placed(slot, self.start_deadline(slot) - time.monotonic()):
                self.unplaceable(slot)
                return
            info = self._hello(slot)
            if slot.alive or slot.info is info:  # started (or refused on its registry: dispatch says so)
                return
            self._died(slot, info["problems"][0]["detail"], {})

    def _placed(self, slot: WorkerSlot, wait_s: float = 0.0) -> bool:
        """Whether ``slot``'s (re)started worker answers its hello within ``wait_s`` (Ray not running: as
        if it had)."""
        try:
            return bool(self._ray.wait([slot.starting], timeout=max(0.0, wait_s))[0])
        except Exception:  # noqa: BLE001 - Ray shut down before the pool
            return True

    def close(self) -> None:
        for slot in getattr(self, "_slots", []):
            if slot.starting is not None and slot.restarts and not self._placed(slot):
                self.unplaceable(slot, at_close=True)  # the user hears of a worker that never came back
            if slot.actor is not None:
                self._kill(slot.actor)
                slot.actor, slot.alive, slot.starting = None, False, None
        store = getattr(self, "cache_store", None)
        if store is not None and not self._cache_dir:  # in memory: this pool's own (a file's may be shared)
            self._kill(store)
            self.cache_store = None
        self._stop_ray()
