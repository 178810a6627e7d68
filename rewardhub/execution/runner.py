"""The runner: scores a batch of samples with the config's reward terms, under their policies."""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from ..errors import RewardhubError
from ..errors import UsageError
from ._async import run_async
from ._cache import CachePlan
from ._cache import cache_for
from ._callers import CANCELLED
from ._callers import Cancel
from ._callers import cancelled_error
from ._callers import until_cancelled
from ._calls import CallsOne
from ._calls import call_many
from ._calls import check_sample
from ._calls import group_key
from ._columns import Column
from ._facts import TermFacts
from ._facts import effective_executor
from ._facts import term_facts
from ._facts import terms_provenance
from ._fast import fast_eligible
from ._fast import run_fast
from ._fast import run_fast_until
from ._local import run_inline
from ._local import run_threads
from ._process import ProcessPool
from ._results import ScoreResult
from ._results import apply_on_failure
from ._results import check_aggregation
from ._results import combine
from ._task import Task
from ._terms import ExecutorFactory
from ._terms import RemoteExecutor
from ._terms import Term
from ._terms import resolve_terms

__all__ = ["Runner"]

Progress = Callable[[int, int], None]


class Runner:
    """Score batches with a list of :class:`Term`; reuse it across batches and :meth:`close` it.

    Build one with :meth:`from_config`.
    """

    cancels = True  # score(cancel=...) drops the calls not started

    def __init__(
        self,
        terms: Sequence[Term],
        aggregation: str = "weighted_sum",
        *,
        executors: Mapping[str, ExecutorFactory] | None = None,
        process_workers: int | None = None,
        cache_dir: str | None = None,
        cache_store: Any = None,
        serve_models: bool = True,
    ) -> None:
        check_aggregation(aggregation)
        names = [t.name for t in terms]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise UsageError(f"reward terms named twice: {', '.join(map(repr, dup))}\ngive one an 'alias'")
        self.terms = list(terms)
        self.aggregation = aggregation
        self._process_workers = process_workers
        self._pool: ProcessPool | None = None
        #: executor name (``ray``) -> what builds the executor of one of its pools
        self._executors = dict(executors or {})
        self._remote: dict[str | None, RemoteExecutor] = {}  # pool name -> its executor, once started
        self.abandoned_threads = 0
        self._cache = cache_for(self.terms, cache_dir, cache_store)  # None: no term has cache on
        #: the judges' served models (``serve:``): started here, stopped by close()
        self._served: list[Any] = []
        # a judge's served model (builtin.served); serve_models=False: a config's check
        if serve_models and any(t.kwargs.get("serve") for t in self.terms):
            from ..builtin.served import start_for_terms

            self._served = start_for_terms(self.terms)
        #: score() may be called from several threads at once: their batches share the process pool
        #: (see ProcessPool.run); this lock only guards starting the pool and the remote executors
        self._start_lock = threading.Lock()

    # ---- construction -----------------------------------------------------------------
    @classmethod
    def from_config(cls, reward_cfg: Any, registry: Any = None, *,
                    executors: Mapping[str, ExecutorFactory] | None = None, **kwargs: Any) -> Runner:
        """Resolve the terms of a ``reward:`` section against a registry (built if not given).

        :param reward_cfg: a :class:`~rewardhub.config.schema.RewardConfig` (a loaded plan's), or a raw
            section (a mapping or ``DictConfig``), validated here.

        Terms with ``executor: ray`` need a Ray executor: build the runner with
        :func:`rewardhub.distributed.runner_from_config`, or pass ``executors={"ray": ...}``.
        """
        from ..config.schema import validate_reward

        reward = validate_reward(reward_cfg)
        return cls(resolve_terms(reward, registry), reward.aggregation, executors=executors, **kwargs)

    # ---- scoring ------------------------------------------------------------------------
    def score(self, samples: Sequence[Mapping[str, Any]], progress: Progress | None = None, *,
              indices: Sequence[int] | None = None, cancel: Cancel | None = None,
              defer_raise: bool = False) -> ScoreResult:
        """Score every sample with every term that applies to it; never loses a sample.

        Safe to call from several threads at once (e.g. ``asyncio.to_thread`` from many tasks, or
        :meth:`score_async`): their batches run side by side, sharing the process pool's workers.

        :param indices: the samples' positions in a larger batch they were taken from (a Ray
            reward worker gets part of the driver's batch): named in error messages and carried
            by the outcomes' ``index``.
        :param cancel: set by the caller once nobody waits for these scores (a client went away):
            the calls no worker has started are dropped and this raises
            :class:`~rewardhub.RewardhubError` (see :meth:`score_async`, which sets it when cancelled).
        :param defer_raise: a term with ``on_failure: raise`` does not raise: its failed samples get
            NaN and keep their failure in ``columns``, for a caller that pooled the samples of several
            callers and fails only those whose samples failed (``rewardhub serve``).
        """
        return self._score(samples, progress, indices, cancel, defer_raise)

    def _score(self, samples: Sequence[Mapping[str, Any]], progress: Progress | None,
               indices: Sequence[int] | None, cancel: Cancel | None, defer_raise: bool = False,
               ) -> ScoreResult:
        batch = samples if type(samples) is list else list(samples)
        n = len(batch)
        labels = list(indices) if indices is not None else None
        fast = {t.name: self._is_fast(t) and not t.policy.cache for t in self.terms}
        # the fast loop checks samples as it goes; others, and trajectories (told by the first), first
        if not all(fast.values()) or (n and type(batch[0]) is dict and "response" not in batch[0]):
            batch = [check_sample(s, i if labels is None else labels[i]) for i, s in enumerate(batch)]
        columns: dict[str, Column] = {}
        total = n * len(self.terms)
        done_units = 0
        plans: dict[str, CachePlan] = {}  # a term with cache on: what it calls, what the rest get
        process_jobs: list[tuple[Term, list[Task]]] = []
        for term in self.terms:
            if cancel is not None and cancel.is_set():  # nobody waits for these scores any more
                cancel.kept = columns
                raise cancelled_error()
            if fast[term.name]:
                if cancel is None:
                    col = run_fast(term.invoker, batch, term.kwargs, term.name, term.policy.retries, labels)
                else:
                    col = columns[term.name] = Column(0, labels)
                    run_fast_until(term.invoker, batch, term.kwargs, term.name, term.policy.retries, labels,
                                   cancel, col)
                    if cancel.is_set():  # stopped between slices: the samples scored are kept
                        self._apply(term, col, True)
                        cancel.kept = columns
                        raise cancelled_error()
                columns[term.name] = col
            else:
                idx = [i for i, s in enumerate(batch) if term.applies(s)] if term.routed else list(range(n))
                col = columns[term.name] = Column(n, labels)
                if len(idx) < n:
                    col.not_applicable(sorted(set(range(n)) - set(idx)))
                if self._cache is not None and term.policy.cache:
                    plans[term.name] = plan = self._cache.plan(term, batch, idx, col)
                    idx = plan.run
                if not idx:
                    done_units += n
                    continue
                executor = effective_executor(term)
                if executor == "process":
                    process_jobs.append((term, self._tasks(term, batch, idx)))
                    continue
                if executor == "ray":
                    self._run_ray(term, batch, idx, col)
                else:
                    self._run_local(term, executor, batch, idx, col, cancel)
                    if cancel is not None and cancel.is_set():  # its calls not made: no scores to give
                        self._apply(term, col, True, plans.get(term.name))  # what was paid for is cached
                        cancel.kept = columns
                        raise cancelled_error()
            self._apply(term, col, defer_raise, plans.get(term.name))
            done_units += n
            if progress:
                progress(done_units, total)
        if process_jobs:
            pool = self._get_pool()
            all_tasks = [t for _, tasks in process_jobs for t in tasks]

            def tick(task: Task) -> None:
                nonlocal done_units
                done_units += len(task.tag[1])
                if progress:
                    progress(done_units, total)

            try:
                pool.run(all_tasks, tick, cancel)
            except RewardhubError:
                if cancel is None or not cancel.is_set():
                    raise
                for term, tasks in process_jobs:  # keep (and cache) what the calls that ended gave
                    col = columns[term.name]
                    for task in tasks:
                        res = task.result or ("error", CANCELLED, 0.0)
                        col.store_call(term.name, task.tag[1], task.mode, res, task.attempts)
                    self._apply(term, col, True, plans.get(term.name))
                cancel.kept = columns
                raise
            for term, tasks in process_jobs:
                col = columns[term.name]
                for task in tasks:
                    assert task.result is not None
                    col.store_call(term.name, task.tag[1], task.mode, task.result, task.attempts)
                self._apply(term, col, defer_raise, plans.get(term.name))
        return self._combine(n, columns)

    async def score_async(self, samples: Sequence[Mapping[str, Any]], *,
                          indices: Sequence[int] | None = None) -> ScoreResult:
        """:meth:`score` for a coroutine: runs in a thread of the event loop's default executor, so
        many tasks may await their batches at once (they share the pool) without blocking the loop.

        Cancelled (its caller went away), it stops what nobody waits for: its calls that no worker
        has started are dropped, so they do not hold up the other callers."""
        import asyncio

        loop = asyncio.get_running_loop()
        cancel = Cancel()
        try:
            return await loop.run_in_executor(None, lambda: self._score(samples, None, indices, cancel))
        except asyncio.CancelledError:
            cancel.set()
            raise

    def _is_fast(self, term: Term) -> bool:
        return not term.routed and effective_executor(term) == "inline" and fast_eligible(term.invoker)

    def _tasks(self, term: Term, batch: list[Any], idx: list[int]) -> list[Task]:
        pool = self._get_pool()
        pool.register(term.name, term.payload)
        pol = term.policy
        if term.invoker.kind == "function":
            return [Task(term.name, "one", batch[i], term.kwargs, pol.timeout_s, pol.retries,
                         tag=(term.name, [i])) for i in idx]
        return [Task(term.name, "many", [batch[i] for i in chunk], term.kwargs, pol.timeout_s, pol.retries,
                     tag=(term.name, chunk)) for chunk in self._chunks(term, batch, idx, pool.size)]

    @staticmethod
    def _chunks(term: Term, batch: list[Any], idx: list[int], parts: int) -> list[list[int]]:
        if term.invoker.kind == "group":
            groups: dict[Any, list[int]] = {}
            for i in idx:
                groups.setdefault(group_key(batch[i]), []).append(i)
            return list(groups.values())
        size = max(1, math.ceil(len(idx) / max(1, parts)))
        return [idx[k:k + size] for k in range(0, len(idx), size)]

    def _run_local(self, term: Term, executor: str, batch: list[Any], idx: list[int], col: Column,
                   cancel: Cancel | None = None) -> None:
        inv, kw, pol = term.invoker, term.kwargs, term.policy
        calls: Sequence[Callable[[], Any]]
        if inv.kind == "function":
            calls = CallsOne(inv, batch, idx, kw)
        else:
            units = self._chunks(term, batch, idx, 1)
            calls = [call_many(inv, batch, u, kw) for u in units]
        if cancel is not None:
            calls = until_cancelled(calls, cancel)
        abandoned = 0
        if executor == "thread":
            results, abandoned = run_threads(calls, pol.timeout_s, pol.max_concurrency, pol.retries)
        elif inv.is_async:
            results, abandoned = run_async(calls, pol.timeout_s, pol.max_concurrency, pol.retries)
        else:
            results = run_inline(calls, pol.retries)
        if abandoned:
            with self._start_lock:
                self.abandoned_threads += abandoned
        if inv.kind == "function":
            put, name = col.put, term.name
            for i, (status, value, latency) in zip(idx, results):
                if status == "ok":  # the common case, stored straight
                    put(i, value, name, latency)
                else:
                    col.store_call(term.name, [i], "one", (status, value, latency), 1)
            return
        for unit, res in zip(units, results):
            col.store_call(term.name, unit, "many", res, 1)

    def _run_ray(self, term: Term, batch: list[Any], idx: list[int], col: Column) -> None:
        with self._start_lock:
            executor = self._start_remote(term)
        for i, out in zip(idx, executor.score_term(term.name, [batch[i] for i in idx],
                                                        [col.label(i) for i in idx])):
            col.put_outcome(i, out)

    def _start_remote(self, term: Term) -> RemoteExecutor:
        executor = self._remote.get(term.pool)
        if executor is None:
            factory = self._executors.get("ray")
            if factory is None:
                raise UsageError(
                    f"reward {term.name!r} has executor: ray, but this Runner was built without a "
                    "Ray executor\nbuild it with rewardhub.distributed.runner_from_config(reward_cfg), "
                    "or pass Runner(..., executors={'ray': ...})"
                )
            mine = [t for t in self.terms if t.policy.executor == "ray" and t.pool == term.pool]
            executor = self._remote[term.pool] = factory(term.pool, mine)
        return executor

    @staticmethod
    def _apply(term: Term, col: Column, defer_raise: bool = False, plan: CachePlan | None = None) -> None:
        if plan is not None:  # the samples that shared a call (or were not called) get its result first
            plan.finish(col)
        on_failure = term.policy.on_failure
        apply_on_failure(term.name, "nan" if defer_raise and on_failure == "raise" else on_failure, col)

    def _combine(self, n: int, columns: dict[str, Column]) -> ScoreResult:
        return combine([(t.name, t.weight) for t in self.terms], self.aggregation, n, columns)

    # ---- resources ----------------------------------------------------------------------
    def _get_pool(self) -> ProcessPool:
        if (pool := self._pool) is not None:
            return pool
        with self._start_lock:
            return self._new_pool()

    def _new_pool(self) -> ProcessPool:
        if self._pool is None:
            sizes = [t.policy.max_concurrency for t in self.terms
                     if effective_executor(t) == "process" and t.policy.max_concurrency]
            size = self._process_workers or (max(sizes) if sizes else (os.cpu_count() or 2))
            self._pool = ProcessPool(size)
        return self._pool

    def worker_pids(self) -> list[int]:
        return self._pool.pids() if self._pool else []

    @property
    def worker_crashes(self) -> int:
        """How many of the process pool's workers died by themselves (a reward's ``os._exit``, a crash)."""
        return self._pool.crashes if self._pool else 0

    @property
    def facts(self) -> tuple[TermFacts, ...]:
        """Each term as callers see it (the :class:`~rewardhub.execution.Scorer` protocol)."""
        return tuple(map(term_facts, self.terms))

    def provenance(self) -> list[dict[str, Any]]:
        """Where each term's reward came from and which processes ran it (``--summary-json``)."""
        return terms_provenance(self.terms, self.ray_workers(), self.worker_pids())

    def ray_workers(self) -> list[dict[str, Any]]:
        """The Ray reward workers started so far, pool by pool (role, pool, node, pid, fingerprint)."""
        return [w for executor in self._remote.values() for w in executor.workers_info()]

    def pool_figures(self) -> list[dict[str, Any]]:  # each Ray pool's (RewardWorkerPool.pool_figures)
        return [f for e in self._remote.values() for f in e.pool_figures()]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        for executor in self._remote.values():
            executor.close()
        self._remote.clear()
        while self._served:
            self._served.pop().close()

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

