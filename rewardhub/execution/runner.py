"""The runner: scores a batch of samples with the config's reward terms, under their policies."""

from __future__ import annotations

import dataclasses
import functools
import math
import operator
import os
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from itertools import repeat
from typing import Any

from ..errors import RewardExecutionError
from ..errors import UsageError
from ..types import EXECUTORS
from ..types import ON_FAILURE
from ..types import ExecutionPolicy
from ..types import RewardSpec
from ._calls import Invoker
from ._calls import make_invoker
from ._columns import Column
from ._columns import column_metrics
from ._columns import stats
from ._fast import fast_eligible
from ._fast import run_fast
from ._local import run_async
from ._local import run_inline
from ._local import run_threads
from ._outcome import ERROR
from ._outcome import TIMEOUT
from ._outcome import Outcome
from ._process import ProcessPool
from ._process import Task
from ._process import WorkerPayload

__all__ = ["AGGREGATIONS", "Runner", "ScoreResult", "Term", "resolve_term", "sandbox_settings"]

AGGREGATIONS = ("weighted_sum", "normalize_then_sum")
Progress = Callable[[int, int], None]


def _get(cfg: Any, key: str, default: Any = None) -> Any:
    if cfg is None:
        return default
    value = cfg.get(key, default) if isinstance(cfg, Mapping) else getattr(cfg, key, default)
    return default if value is None else value


def _plain(x: Any) -> Any:
    """DictConfig/ListConfig -> plain containers (cheap no-op for plain data)."""
    if hasattr(x, "_get_node") or type(x).__name__ in ("DictConfig", "ListConfig"):
        from omegaconf import OmegaConf

        return OmegaConf.to_container(x, resolve=True)
    return x


@dataclass
class Term:
    """One resolved reward term of a config."""

    name: str
    spec: RewardSpec
    policy: ExecutionPolicy
    invoker: Invoker
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
    def payload(self) -> WorkerPayload:
        return WorkerPayload(self.spec.target, self.spec.sha256, self.spec.params, self.invoker.kind,
                             self.invoker.adapter, self.name, pure=self.policy.pure,
                             memory_limit_mb=self.policy.memory_limit_mb,
                             max_concurrency=self.policy.max_concurrency)


class ScoreResult:
    """Scores of one batch: one row per input sample, in input order, plus metrics.

    ``scores`` and ``metrics`` are computed by :meth:`Runner.score`; ``rewards`` (term name ->
    score per sample), ``extra``, ``errors`` and ``outcomes`` are built from the per-term columns
    the first time they are read.
    """

    def __init__(self, scores: list[float | None], columns: dict[str, Column], metrics: dict[str, float]) -> None:
        self.scores = scores
        self.columns = columns
        self.metrics = metrics

    @functools.cached_property
    def rewards(self) -> list[dict[str, float | None]]:
        names = list(self.columns)
        cols = [c.values for c in self.columns.values()]
        return [dict(zip(names, vs)) for vs in zip(*cols)] if cols else [{} for _ in self.scores]

    @functools.cached_property
    def extra(self) -> list[dict[str, dict[str, Any]]]:
        out: list[dict[str, dict[str, Any]]] = [{} for _ in self.scores]
        for name, col in self.columns.items():
            for i, ex in sorted(col.extra.items()):
                out[i][name] = ex
        return out

    @functools.cached_property
    def errors(self) -> list[dict[str, str]]:
        out: list[dict[str, str]] = [{} for _ in self.scores]
        for name, col in self.columns.items():
            for i, err in sorted(col.errors.items()):
                out[i][name] = err
        return out

    @functools.cached_property
    def outcomes(self) -> dict[str, list[Outcome]]:
        return {name: col.outcomes() for name, col in self.columns.items()}

    def rows(self, samples: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Each input row plus ``score``, ``rewards`` and ``extra`` (and ``errors`` when any)."""
        out = []
        rewards, extra, errors = self.rewards, self.extra, self.errors
        for i, s in enumerate(samples):
            row = dict(s)
            row["score"] = self.scores[i]
            row["rewards"] = rewards[i]
            row["extra"] = extra[i]
            if errors[i]:
                row["errors"] = errors[i]
            out.append(row)
        return out


class Runner:
    """Score batches with a list of :class:`Term`; reuse it across batches and :meth:`close` it.

    Build one with :meth:`from_config`.
    """

    def __init__(self, terms: Sequence[Term], aggregation: str = "weighted_sum", *,
                 process_workers: int | None = None, ray_options: Mapping[str, Any] | None = None,
                 ray_pools: Mapping[str, Mapping[str, Any]] | None = None, warm_spares: bool = True) -> None:
        if aggregation not in AGGREGATIONS:
            raise UsageError(f"reward.aggregation={aggregation!r} is not valid\nallowed: {', '.join(AGGREGATIONS)}")
        names = [t.name for t in terms]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise UsageError(f"reward terms named twice: {', '.join(map(repr, dup))}\ngive one an 'alias'")
        self.terms = list(terms)
        self.aggregation = aggregation
        self._process_workers = process_workers
        #: the process pool's new workers come from a template that replayed recent calls of fast
        #: rewards (see rewardhub.execution._template); False where a reward must not run twice
        self._warm_spares = warm_spares
        self._pool: ProcessPool | None = None
        self._ray_options = dict(ray_options or {})
        #: options of the Ray pools that terms name (``Term.pool``), over ``ray_options``
        self._ray_pools = {k: dict(v) for k, v in (ray_pools or {}).items()}
        self._ray: dict[str | None, Any] = {}  # pool name -> RayExecutor
        self.abandoned_threads = 0

    # ---- construction -----------------------------------------------------------------
    @classmethod
    def from_config(cls, reward_cfg: Any, registry: Any = None, **kwargs: Any) -> Runner:
        """Resolve the terms of a ``reward:`` config section against a registry (built if not given)."""
        from ..registry import build_registry

        if registry is None:
            registry = build_registry(reward_cfg)
        terms_cfg = _get(reward_cfg, "rewards", []) or []
        if not terms_cfg:
            raise UsageError("reward.rewards is empty: name at least one reward term\n"
                             "e.g. reward: {rewards: [{name: math_verify}]} (see `rewardhub list`)")
        sandbox = sandbox_settings(reward_cfg)
        rm_section = _get(reward_cfg, "reward_model")
        rm = dict(_plain(rm_section)) if rm_section is not None else None
        terms = [resolve_term(registry, t, i, sandbox=sandbox, reward_model=rm) for i, t in enumerate(terms_cfg)]
        workers = _get(reward_cfg, "workers")
        ray_options = dict(_plain(workers)) if workers is not None else {}
        plugins = _get(reward_cfg, "plugins")
        if plugins is not None:  # reward workers rebuild the registry from the same plugin sources
            ray_options["plugins"] = _plain(plugins)
        ray_pools = {}
        rm_pool = reward_model_pool(rm, ray_options) if rm and rm.get("enable") else {}
        for term, term_cfg in zip(terms, terms_cfg):
            executor = None if isinstance(term_cfg, str) else _get(_plain(term_cfg), "executor")
            if on_reward_model_pool(rm, term.spec.capabilities, executor):
                term.policy = term.policy.merged(executor="ray")
                term.pool = rm_pool["pool"]
                ray_pools[term.pool] = rm_pool
        return cls(terms, _get(reward_cfg, "aggregation", "weighted_sum"), ray_options=ray_options,
                   ray_pools=ray_pools, **kwargs)

    # ---- scoring ------------------------------------------------------------------------
    def score(self, samples: Sequence[Mapping[str, Any]], progress: Progress | None = None) -> ScoreResult:
        """Score every sample with every term that applies to it; never loses a sample."""
        batch = samples if type(samples) is list else list(samples)
        n = len(batch)
        fast = {t.name: self._is_fast(t) for t in self.terms}
        if not all(fast.values()):  # the fast loop checks samples as it goes; others need it first
            batch = [_check_sample(s, i) for i, s in enumerate(batch)]
        columns: dict[str, Column] = {}
        total = n * len(self.terms)
        done_units = 0
        process_jobs: list[tuple[Term, list[Task]]] = []
        for term in self.terms:
            if fast[term.name]:
                col = run_fast(term.invoker, batch, term.kwargs, term.name, term.policy.retries)
                columns[term.name] = col
            else:
                idx = [i for i, s in enumerate(batch) if term.applies(s)] if term.routed else list(range(n))
                col = columns[term.name] = Column(n)
                if len(idx) < n:
                    col.not_applicable(sorted(set(range(n)) - set(idx)))
                if not idx:
                    done_units += n
                    continue
                executor = self._executor_of(term)
                if executor == "process":
                    process_jobs.append((term, self._tasks(term, batch, idx)))
                    continue
                if executor == "ray":
                    self._run_ray(term, batch, idx, col)
                else:
                    self._run_local(term, executor, batch, idx, col)
            self._apply(term, col)
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

            pool.run(all_tasks, tick)
            for term, tasks in process_jobs:
                col = columns[term.name]
                for task in tasks:
                    assert task.result is not None
                    self._store(term, task.tag[1], task.mode, task.result, col, task.attempts)
                self._apply(term, col)
        return self._combine(n, columns)

    def _is_fast(self, term: Term) -> bool:
        return not term.routed and self._executor_of(term) == "inline" and fast_eligible(term.invoker)

    def _executor_of(self, term: Term) -> str:
        ex = term.policy.executor
        if ex == "inline" and term.policy.timeout_s and not term.invoker.is_async:
            return "process"  # a sync call can only be timed out by killing its process
        return ex

    def _tasks(self, term: Term, batch: list[Any], idx: list[int]) -> list[Task]:
        pool = self._get_pool()
        pool.register(term.name, term.payload)
        pol = term.policy
        if term.invoker.kind == "function":
            return [Task(term.name, "one", batch[i], term.kwargs, pol.timeout_s, pol.retries, tag=(term.name, [i]))
                    for i in idx]
        return [Task(term.name, "many", [batch[i] for i in chunk], term.kwargs, pol.timeout_s, pol.retries,
                     tag=(term.name, chunk)) for chunk in self._chunks(term, batch, idx, pool.size)]

    @staticmethod
    def _chunks(term: Term, batch: list[Any], idx: list[int], parts: int) -> list[list[int]]:
        if term.invoker.kind == "group":
            groups: dict[Any, list[int]] = {}
            for i in idx:
                s = batch[i]
                info = s.get("extra_info") if isinstance(s.get("extra_info"), Mapping) else {}
                key = next((info[k] for k in ("group", "group_id", "uid") if info.get(k) is not None),
                           None)
                groups.setdefault(repr(key) if key is not None else repr(s.get("prompt")), []).append(i)
            return list(groups.values())
        size = max(1, math.ceil(len(idx) / max(1, parts)))
        return [idx[k:k + size] for k in range(0, len(idx), size)]

    def _run_local(self, term: Term, executor: str, batch: list[Any], idx: list[int], col: Column) -> None:
        inv, kw, pol = term.invoker, term.kwargs, term.policy
        if inv.kind == "function":
            units = [[i] for i in idx]
            calls = [(lambda i=i: inv.call_one(batch[i], kw)) for i in idx]
        else:
            units = self._chunks(term, batch, idx, 1)
            calls = [(lambda u=u: inv.call_many([batch[i] for i in u], kw)) for u in units]
        if executor == "thread":
            results, abandoned = run_threads(calls, pol.timeout_s, pol.max_concurrency, pol.retries)
            self.abandoned_threads += abandoned
        elif inv.is_async:
            results = run_async(calls, pol.timeout_s, pol.max_concurrency, pol.retries)
        else:
            results = run_inline(calls, pol.retries)
        mode = "one" if inv.kind == "function" else "many"
        for unit, res in zip(units, results):
            self._store(term, unit, mode, res, col, 1)

    def _run_ray(self, term: Term, batch: list[Any], idx: list[int], col: Column) -> None:
        executor = self._ray.get(term.pool)
        if executor is None:
            from ..distributed import RayExecutor

            opts = self._ray_pools.get(term.pool, self._ray_options)  # term.pool None: reward.workers
            mine = [t for t in self.terms if t.policy.executor == "ray" and t.pool == term.pool]
            executor = self._ray[term.pool] = RayExecutor(mine, opts)
        for i, out in zip(idx, executor.score_term(term.name, [batch[i] for i in idx], idx)):
            col.put_outcome(i, out)

    @staticmethod
    def _store(term: Term, unit: list[int], mode: str, res: tuple[str, Any, float], col: Column,
               attempts: int) -> None:
        status, value, latency = res
        if status != "ok":
            for i in unit:
                col.fail(i, TIMEOUT if status == "timeout" else ERROR, f"reward {term.name!r} on sample {i}: {value}",
                         latency / max(1, len(unit)), attempts)
            return
        if mode == "one":
            col.put(unit[0], value, term.name, latency, attempts)
            return
        if not isinstance(value, (list, tuple)) or len(value) != len(unit):
            got = f"{type(value).__name__} of length {len(value)}" if isinstance(value, (list, tuple)) \
                else repr(value)[:60]
            for i in unit:
                col.fail(i, ERROR, f"batched reward {term.name!r} returned {got} for {len(unit)} samples "
                                   f"(sample {i})", latency / len(unit), attempts)
            return
        for i, raw in zip(unit, value):
            col.put(i, raw, term.name, latency / len(unit), attempts)

    @staticmethod
    def _apply(term: Term, col: Column) -> None:
        """Give every failed sample its ``on_failure`` value (or raise, naming the first)."""
        how = term.policy.on_failure
        failed = col.failures()
        if not failed:
            return
        if how == "raise":
            i = failed[0]
            raise RewardExecutionError(
                f"{col.errors[i]}\n(on_failure: raise for reward {term.name!r}; use zero, nan or drop to go on)",
                reward=term.name, index=i)
        value = 0.0 if how == "zero" else math.nan if how == "nan" else None
        for i in failed:
            col.values[i] = value

    @staticmethod
    def _apply_policy(term: Term, outs: list[Outcome]) -> None:
        """:meth:`_apply` for a list of :class:`Outcome` (changed in place)."""
        col = Column.from_outcomes(outs)
        Runner._apply(term, col)
        for i in col.failures():
            outs[i].value = col.values[i]

    def _aggregate(self, batch: Sequence[Any], outcomes: dict[str, list[Outcome]]) -> ScoreResult:
        """Combine per-term :class:`Outcome` lists (one per sample) into a :class:`ScoreResult`."""
        return self._combine(len(batch), {t.name: Column.from_outcomes(outcomes[t.name]) for t in self.terms})

    def _combine(self, n: int, columns: dict[str, Column]) -> ScoreResult:
        terms = [(t.weight, columns[t.name]) for t in self.terms]
        term_stats = {t.name: stats(columns[t.name].values, columns[t.name].has_none()) for t in self.terms}
        values = [c.values for _, c in terms]
        if self.aggregation == "normalize_then_sum":
            normed = []
            for t, vs in zip(self.terms, values):
                mean, std, _ = term_stats[t.name]
                mean = 0.0 if math.isnan(mean) else mean
                normed.append([None if v is None else (v - mean) / std if std > 1e-12 else v - mean for v in vs])
            values = normed
        simple = not any(c.has_none() for _, c in terms)
        if simple and len(terms) == 1:  # one term, a value for every sample: no per-sample work
            w = terms[0][0]
            scores: list[float | None] = list(values[0]) if w == 1.0 else list(map(operator.mul, values[0],
                                                                                    repeat(w, n)))
        elif simple and terms:
            ws = [w for w, _ in terms]
            scores = [sum(map(operator.mul, vs, ws)) for vs in zip(*values)]
        else:
            weights = [w for w, _ in terms]
            scores = []
            for vs in zip(*values) if values else ((),) * n:
                parts = [w * v for w, v in zip(weights, vs) if v is not None]
                scores.append(sum(parts) if parts else None)
        if len(terms) == 1 and simple and self.aggregation == "weighted_sum":
            mean, std, count = term_stats[self.terms[0].name]
            w = terms[0][0]
            agg = (mean * w, std * abs(w), count)
        else:
            agg = stats(scores)
        metrics: dict[str, float] = {"reward/mean": agg[0], "reward/std": agg[1], "reward/count": float(agg[2])}
        for t in self.terms:
            metrics.update(column_metrics(t.name, columns[t.name], term_stats[t.name]))
        return ScoreResult(scores, columns, metrics)

    # ---- resources ----------------------------------------------------------------------
    def _get_pool(self) -> ProcessPool:
        if self._pool is None:
            sizes = [t.policy.max_concurrency for t in self.terms
                     if self._executor_of(t) == "process" and t.policy.max_concurrency]
            size = self._process_workers or (max(sizes) if sizes else (os.cpu_count() or 2))
            self._pool = ProcessPool(size, warm_spares=self._warm_spares)
        return self._pool

    def worker_pids(self) -> list[int]:
        return self._pool.pids() if self._pool else []

    def describe(self) -> list[dict[str, Any]]:
        """One line of facts per term (name, target, executor actually used, policy, weight)."""
        return [{"name": t.name, "reward": t.spec.name, "target": t.spec.target, "origin": t.spec.origin,
                 "executor": self._executor_of(t), "timeout_s": t.policy.timeout_s,
                 "on_failure": t.policy.on_failure, "retries": t.policy.retries, "weight": t.weight,
                 "kind": t.invoker.kind, "adapter": t.invoker.adapter} for t in self.terms]

    def ray_workers(self) -> list[dict[str, Any]]:
        """The Ray reward workers started so far, pool by pool (role, pool, node, pid, fingerprint)."""
        return [w for executor in self._ray.values() if executor._pool is not None
                for w in executor.pool.workers_info()]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        for executor in self._ray.values():
            executor.close()
        self._ray.clear()

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def _check_sample(s: Any, i: int) -> dict[str, Any]:
    if type(s) is dict and "response" in s:
        return s
    if not isinstance(s, Mapping):
        raise UsageError(f"sample {i} is a {type(s).__name__}, not a mapping with 'response'")
    if "response" not in s:
        raise UsageError(f"sample {i} has no 'response' (keys: {', '.join(sorted(map(str, s))) or 'none'})\n"
                         "each sample needs prompt, response, ground_truth, data_source, extra_info")
    return dict(s)


def sandbox_settings(reward_cfg: Any) -> dict[str, Any] | None:
    """The ``reward.sandbox`` section as a plain dict (``None`` when the config has none)."""
    section = _get(reward_cfg, "sandbox")
    if section is None:
        return None
    if dataclasses.is_dataclass(section) and not isinstance(section, type):
        return dataclasses.asdict(section)
    section = _plain(section)
    if not isinstance(section, Mapping):
        raise UsageError(f"reward.sandbox must be a mapping (url, max_concurrent, memory_limit_mb, timeout_s, "
                         f"language), got {section!r}")
    return dict(section)


def on_reward_model_pool(rm: Mapping[str, Any] | None, capabilities: Sequence[str], executor: str | None) -> bool:
    """Whether a term runs on the reward-model pool: ``reward.reward_model.enable`` is set, its
    reward has the ``reward_model`` capability and the term names no executor but ``ray``."""
    return bool(rm and rm.get("enable")) and "reward_model" in capabilities and executor in (None, "ray")


def reward_model_pool(rm: Mapping[str, Any], workers: Mapping[str, Any]) -> dict[str, Any]:
    """Ray pool options for reward-model terms, from ``reward.reward_model`` (verl's ``reward_model.*``).

    ``num_workers`` actors on the pool named ``rm["pool"]``; each gets an equal share of
    ``n_gpus_per_node * nnodes`` GPUs (none on a CPU machine). The Ray address and the plugin
    sources are those of ``reward.workers``.
    """
    num_workers = max(1, int(rm.get("num_workers") or 1))
    gpus = float(rm.get("n_gpus_per_node") or 0) * max(1, int(rm.get("nnodes") or 1))
    opts: dict[str, Any] = {"pool": str(rm.get("pool") or "reward_model"), "num_workers": num_workers,
                            "num_cpus": 1.0, "num_gpus": gpus / num_workers}
    for key in ("address", "plugins"):
        if workers.get(key) is not None:
            opts[key] = workers[key]
    return opts


def resolve_term(registry: Any, term_cfg: Any, index: int = 0, *, sandbox: Mapping[str, Any] | None = None,
                 reward_model: Mapping[str, Any] | None = None) -> Term:
    """Turn one config term into a :class:`Term`: the spec, the loaded callable, the merged policy.

    :param sandbox: the ``reward.sandbox`` settings; a reward whose spec has the ``sandbox``
        capability gets them as the keyword argument ``sandbox`` (a plain dict), unless the
        term's own ``kwargs`` set ``sandbox``.
    :param reward_model: the ``reward.reward_model`` settings, passed the same way (keyword
        ``reward_model``) to rewards with the ``reward_model`` capability.
    """
    term_cfg = _plain(term_cfg)
    if isinstance(term_cfg, str):
        term_cfg = {"name": term_cfg}
    if not isinstance(term_cfg, Mapping):
        raise UsageError(f"reward.rewards[{index}] must be a mapping, got {term_cfg!r}")
    spec = registry.term_spec(term_cfg)
    spec, fn = registry.load_full(spec)
    kind = _get(term_cfg, "kind") or spec.kind
    name = str(_get(term_cfg, "alias") or spec.name)
    for key, allowed in (("executor", EXECUTORS), ("on_failure", ON_FAILURE)):
        value = _get(term_cfg, key)
        if value is not None and value not in allowed:
            raise UsageError(f"reward.rewards[{index}].{key}={value!r} is not valid\nallowed: {', '.join(allowed)}")
    policy = spec.policy.merged(
        executor=_get(term_cfg, "executor"),
        timeout_s=_get(term_cfg, "timeout_s"),
        max_concurrency=_get(term_cfg, "max_concurrency"),
        retries=_get(term_cfg, "retries"),
        on_failure=_get(term_cfg, "on_failure"),
        pure=_get(term_cfg, "pure"),
        memory_limit_mb=_get(term_cfg, "memory_limit_mb"),
    )
    adapter = _get(term_cfg, "adapter", "auto")
    invoker = make_invoker(fn, kind, adapter, name)
    weight = _get(term_cfg, "weight", 1.0)
    try:
        weight = float(weight)
    except (TypeError, ValueError):
        raise UsageError(f"reward.rewards[{index}].weight={weight!r} is not a number") from None
    data_sources = tuple(_get(term_cfg, "data_sources", ()) or ()) or spec.data_sources
    kwargs = dict(_get(term_cfg, "kwargs", {}) or {})
    if sandbox is not None and "sandbox" in spec.capabilities and "sandbox" not in kwargs:
        kwargs["sandbox"] = dict(sandbox)
    if reward_model is not None and "reward_model" in spec.capabilities and "reward_model" not in kwargs:
        kwargs["reward_model"] = dict(reward_model)
    return Term(name=name, spec=spec, policy=policy, invoker=invoker, weight=weight,
                kwargs=kwargs, data_sources=data_sources,
                tags=tuple(_get(term_cfg, "tags", ()) or ()), adapter=adapter)
