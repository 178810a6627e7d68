"""The runner: scores a batch of samples with the config's reward terms, under their policies."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from typing import Any

from ..errors import RewardExecutionError
from ..errors import UsageError
from ..types import EXECUTORS
from ..types import ON_FAILURE
from ..types import ExecutionPolicy
from ..types import RewardSpec
from ._calls import Invoker
from ._calls import make_invoker
from ._local import run_async
from ._local import run_inline
from ._local import run_threads
from ._outcome import ERROR
from ._outcome import NOT_APPLICABLE
from ._outcome import TIMEOUT
from ._outcome import Outcome
from ._outcome import check_value
from ._process import ProcessPool
from ._process import Task
from ._process import WorkerPayload
from .metrics import aggregate_metrics
from .metrics import term_metrics

__all__ = ["AGGREGATIONS", "Runner", "ScoreResult", "Term"]

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
                             self.invoker.adapter, self.name)


@dataclass
class ScoreResult:
    """Scores of one batch: one row per input sample, in input order, plus metrics."""

    scores: list[float | None]
    rewards: list[dict[str, float | None]]
    extra: list[dict[str, dict[str, Any]]]
    errors: list[dict[str, str]]
    metrics: dict[str, float]
    outcomes: dict[str, list[Outcome]]

    def rows(self, samples: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Each input row plus ``score``, ``rewards`` and ``extra`` (and ``errors`` when any)."""
        out = []
        for i, s in enumerate(samples):
            row = dict(s)
            row["score"] = self.scores[i]
            row["rewards"] = self.rewards[i]
            row["extra"] = self.extra[i]
            if self.errors[i]:
                row["errors"] = self.errors[i]
            out.append(row)
        return out


class Runner:
    """Score batches with a list of :class:`Term`; reuse it across batches and :meth:`close` it.

    Build one with :meth:`from_config`.
    """

    def __init__(self, terms: Sequence[Term], aggregation: str = "weighted_sum", *,
                 process_workers: int | None = None, ray_options: Mapping[str, Any] | None = None) -> None:
        if aggregation not in AGGREGATIONS:
            raise UsageError(f"reward.aggregation={aggregation!r} is not valid\nallowed: {', '.join(AGGREGATIONS)}")
        names = [t.name for t in terms]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise UsageError(f"reward terms named twice: {', '.join(map(repr, dup))}\ngive one an 'alias'")
        self.terms = list(terms)
        self.aggregation = aggregation
        self._process_workers = process_workers
        self._pool: ProcessPool | None = None
        self._ray_options = dict(ray_options or {})
        self._ray: Any = None
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
        terms = [resolve_term(registry, t, i) for i, t in enumerate(terms_cfg)]
        workers = _get(reward_cfg, "workers")
        ray_options = dict(_plain(workers)) if workers is not None else {}
        plugins = _get(reward_cfg, "plugins")
        if plugins is not None:  # reward workers rebuild the registry from the same plugin sources
            ray_options["plugins"] = _plain(plugins)
        return cls(terms, _get(reward_cfg, "aggregation", "weighted_sum"), ray_options=ray_options, **kwargs)

    # ---- scoring ------------------------------------------------------------------------
    def score(self, samples: Sequence[Mapping[str, Any]], progress: Progress | None = None) -> ScoreResult:
        """Score every sample with every term that applies to it; never loses a sample."""
        batch = [_check_sample(s, i) for i, s in enumerate(samples)]
        n = len(batch)
        outcomes: dict[str, list[Outcome]] = {}
        total = n * len(self.terms)
        done_units = 0
        process_jobs: list[tuple[Term, list[Task]]] = []
        for term in self.terms:
            idx = [i for i, s in enumerate(batch) if term.applies(s)]
            outs = [Outcome(None, NOT_APPLICABLE) for _ in range(n)]
            outcomes[term.name] = outs
            if not idx:
                continue
            executor = self._executor_of(term)
            if executor == "process":
                process_jobs.append((term, self._tasks(term, batch, idx)))
                continue
            if executor == "ray":
                self._run_ray(term, batch, idx, outs)
            else:
                self._run_local(term, executor, batch, idx, outs)
            self._apply_policy(term, outs)
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
                outs = outcomes[term.name]
                for task in tasks:
                    assert task.result is not None
                    self._store(term, task.tag[1], task.mode, task.result, outs, task.attempts)
                self._apply_policy(term, outs)
        return self._aggregate(batch, outcomes)

    def _executor_of(self, term: Term) -> str:
        ex = term.policy.executor
        if ex == "inline" and term.policy.timeout_s and not term.invoker.is_async:
            return "process"  # a sync call can only be timed out by killing its process
        return ex

    def _tasks(self, term: Term, batch: list[dict[str, Any]], idx: list[int]) -> list[Task]:
        pool = self._get_pool()
        pool.register(term.name, term.payload)
        pol = term.policy
        if term.invoker.kind == "function":
            return [Task(term.name, "one", batch[i], term.kwargs, pol.timeout_s, pol.retries, tag=(term.name, [i]))
                    for i in idx]
        return [Task(term.name, "many", [batch[i] for i in chunk], term.kwargs, pol.timeout_s, pol.retries,
                     tag=(term.name, chunk)) for chunk in self._chunks(term, batch, idx, pool.size)]

    @staticmethod
    def _chunks(term: Term, batch: list[dict[str, Any]], idx: list[int], parts: int) -> list[list[int]]:
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

    def _run_local(self, term: Term, executor: str, batch: list[dict[str, Any]], idx: list[int],
                   outs: list[Outcome]) -> None:
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
            self._store(term, unit, mode, res, outs, 1)

    def _run_ray(self, term: Term, batch: list[dict[str, Any]], idx: list[int], outs: list[Outcome]) -> None:
        if self._ray is None:
            from ..distributed import RayExecutor

            self._ray = RayExecutor(self.terms, self._ray_options)
        for i, out in zip(idx, self._ray.score_term(term.name, [batch[i] for i in idx], idx)):
            outs[i] = out

    def _store(self, term: Term, unit: list[int], mode: str, res: tuple[str, Any, float],
               outs: list[Outcome], attempts: int) -> None:
        status, value, latency = res
        if status != "ok":
            for i in unit:
                outs[i] = Outcome(None, TIMEOUT if status == "timeout" else ERROR,
                                  error=f"reward {term.name!r} on sample {i}: {value}",
                                  latency_s=latency / max(1, len(unit)), attempts=attempts)
            return
        if mode == "one":
            o = check_value(value, term.name, unit[0])
            o.latency_s, o.attempts = latency, attempts
            outs[unit[0]] = o
            return
        if not isinstance(value, (list, tuple)) or len(value) != len(unit):
            got = f"{type(value).__name__} of length {len(value)}" if isinstance(value, (list, tuple)) \
                else repr(value)[:60]
            for i in unit:
                outs[i] = Outcome(None, ERROR, error=f"batched reward {term.name!r} returned {got} for "
                                                     f"{len(unit)} samples (sample {i})",
                                  latency_s=latency / len(unit))
            return
        for i, raw in zip(unit, value):
            o = check_value(raw, term.name, i)
            o.latency_s, o.attempts = latency / len(unit), attempts
            outs[i] = o

    @staticmethod
    def _apply_policy(term: Term, outs: list[Outcome]) -> None:
        how = term.policy.on_failure
        for i, o in enumerate(outs):
            if o.status not in (ERROR, TIMEOUT):
                continue
            if how == "raise":
                raise RewardExecutionError(
                    f"{o.error}\n(on_failure: raise for reward {term.name!r}; use zero, nan or drop to go on)",
                    reward=term.name, index=i)
            o.value = 0.0 if how == "zero" else math.nan if how == "nan" else None

    def _aggregate(self, batch: list[dict[str, Any]], outcomes: dict[str, list[Outcome]]) -> ScoreResult:
        n = len(batch)
        values = {t.name: [o.value for o in outcomes[t.name]] for t in self.terms}
        if self.aggregation == "normalize_then_sum":
            for name, vs in values.items():
                xs = [v for v in vs if v is not None and not math.isnan(v)]
                mean = sum(xs) / len(xs) if xs else 0.0
                std = math.sqrt(sum((x - mean) ** 2 for x in xs) / len(xs)) if xs else 0.0
                values[name] = [None if v is None else (v - mean) / std if std > 1e-12 else v - mean for v in vs]
        scores: list[float | None] = []
        for i in range(n):
            parts = [(t.weight, values[t.name][i]) for t in self.terms if values[t.name][i] is not None]
            scores.append(sum(w * v for w, v in parts) if parts else None)
        rewards = [{t.name: outcomes[t.name][i].value for t in self.terms} for i in range(n)]
        extra = [{t.name: outcomes[t.name][i].extra for t in self.terms if outcomes[t.name][i].extra}
                 for i in range(n)]
        errors = [{t.name: outcomes[t.name][i].error for t in self.terms
                   if outcomes[t.name][i].error is not None} for i in range(n)]
        metrics: dict[str, float] = aggregate_metrics(scores)
        for t in self.terms:
            metrics.update(term_metrics(t.name, outcomes[t.name]))
        return ScoreResult(scores, rewards, extra, errors, metrics, outcomes)

    # ---- resources ----------------------------------------------------------------------
    def _get_pool(self) -> ProcessPool:
        if self._pool is None:
            sizes = [t.policy.max_concurrency for t in self.terms
                     if self._executor_of(t) == "process" and t.policy.max_concurrency]
            size = self._process_workers or (max(sizes) if sizes else (os.cpu_count() or 2))
            self._pool = ProcessPool(size)
        return self._pool

    def worker_pids(self) -> list[int]:
        return self._pool.pids() if self._pool else []

    def describe(self) -> list[dict[str, Any]]:
        """One line of facts per term (name, target, executor actually used, policy, weight)."""
        return [{"name": t.name, "reward": t.spec.name, "target": t.spec.target, "origin": t.spec.origin,
                 "executor": self._executor_of(t), "timeout_s": t.policy.timeout_s,
                 "on_failure": t.policy.on_failure, "retries": t.policy.retries, "weight": t.weight,
                 "kind": t.invoker.kind, "adapter": t.invoker.adapter} for t in self.terms]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        if self._ray is not None:
            self._ray.close()
            self._ray = None

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
    if not isinstance(s, Mapping):
        raise UsageError(f"sample {i} is a {type(s).__name__}, not a mapping with 'response'")
    if "response" not in s:
        raise UsageError(f"sample {i} has no 'response' (keys: {', '.join(sorted(map(str, s))) or 'none'})\n"
                         "each sample needs prompt, response, ground_truth, data_source, extra_info")
    return dict(s)


def resolve_term(registry: Any, term_cfg: Any, index: int = 0) -> Term:
    """Turn one config term into a :class:`Term`: the spec, the loaded callable, the merged policy."""
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
    )
    adapter = _get(term_cfg, "adapter", "auto")
    invoker = make_invoker(fn, kind, adapter, name)
    weight = _get(term_cfg, "weight", 1.0)
    try:
        weight = float(weight)
    except (TypeError, ValueError):
        raise UsageError(f"reward.rewards[{index}].weight={weight!r} is not a number") from None
    data_sources = tuple(_get(term_cfg, "data_sources", ()) or ()) or spec.data_sources
    return Term(name=name, spec=spec, policy=policy, invoker=invoker, weight=weight,
                kwargs=dict(_get(term_cfg, "kwargs", {}) or {}), data_sources=data_sources,
                tags=tuple(_get(term_cfg, "tags", ()) or ()), adapter=adapter)
