"""After scoring: each term's ``on_failure`` policy, then the weighted aggregation into a
:class:`ScoreResult`.

Public functions, so that whoever scores the terms elsewhere (the Ray reward workers) finishes a
batch exactly as the runner does.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from itertools import repeat
from typing import Any
from typing import Protocol

from ..errors import RewardExecutionError
from ..errors import UsageError
from ..types import AGGREGATIONS
from ._columns import Column
from ._columns import column_metrics
from ._columns import stats
from ._facts import TermFacts
from ._outcome import ERROR
from ._outcome import TIMEOUT
from ._outcome import Outcome
from ._outcome import error_kind_of

__all__ = ["AGGREGATIONS", "ScoreResult", "Scorer", "aggregate", "apply_on_failure",
           "apply_on_failure_to_outcomes", "check_aggregation", "combine", "failure_error"]


def check_aggregation(aggregation: str) -> None:
    """Raise :class:`UsageError` for an aggregation that is not one of :data:`AGGREGATIONS`."""
    if aggregation not in AGGREGATIONS:
        raise UsageError(
            f"reward.aggregation={aggregation!r} is not valid\nallowed: {', '.join(AGGREGATIONS)}"
        )


class ScoreResult:
    """Scores of one batch: one row per input sample, in input order, plus metrics.

    ``scores`` and ``metrics`` are computed by :func:`combine`; ``rewards`` (term name ->
    score per sample), ``extra``, ``errors`` (term -> text), ``error_kinds`` (term -> ``error`` or
    ``timeout``), ``dropped`` (the failed terms left out of a sample's score) and ``outcomes`` are built
    from the per-term columns the first time they are read.
    """

    def __init__(
        self, scores: list[float | None], columns: dict[str, Column], metrics: dict[str, float]
    ) -> None:
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
    def error_kinds(self) -> list[dict[str, str]]:
        cols = self.columns
        return [{name: error_kind_of(cols[name].status.get(i, ERROR), err) for name, err in errs.items()}
                for i, errs in enumerate(self.errors)]

    @functools.cached_property
    def dropped(self) -> list[list[str]]:
        """Per sample, the terms that failed on it and were dropped (``on_failure: drop``): its score is
        the other terms' alone, so a trainer should hold the sample invalid rather than read that score
        as its reward. In a row (``rewardhub score``'s, a server's answer) the same term has its error in
        ``errors`` and ``null`` in ``rewards``; under ``zero`` or ``nan`` the reward is 0.0 or NaN."""
        out: list[list[str]] = [[] for _ in self.scores]
        for name, col in self.columns.items():
            for i in col.failures():
                if col.values[i] is None:
                    out[i].append(name)
        return out

    @classmethod
    def from_rows(cls, rows: Sequence[Mapping[str, Any]], terms: Sequence[str]) -> ScoreResult:
        """The result that output rows (``rewardhub score``'s, a server's answer) hold, for ``terms``;
        metrics as :func:`combine` gives them, without the latencies the rows do not carry."""
        columns: dict[str, Column] = {}
        for name in terms:
            col = columns[name] = Column(len(rows))
            for i, row in enumerate(rows):
                col.values[i] = (row.get("rewards") or {}).get(name)
                if name in (row.get("extra") or {}):
                    col.extra[i] = row["extra"][name]
                if name in (row.get("errors") or {}):
                    kind = (row.get("error_kinds") or {}).get(name, ERROR)
                    col.status[i] = kind if kind == TIMEOUT else ERROR  # a flag's kind is in the text
                    col.errors[i] = row["errors"][name]
        scores = [row.get("score") for row in rows]
        mean, std, count = stats(scores)
        metrics = {"reward/mean": mean, "reward/std": std, "reward/count": float(count)}
        for name, col in columns.items():
            metrics.update({k: v for k, v in column_metrics(name, col).items() if "latency" not in k})
        return cls(scores, columns, metrics)

    @functools.cached_property
    def outcomes(self) -> dict[str, list[Outcome]]:
        return {name: col.outcomes() for name, col in self.columns.items()}


class Scorer(Protocol):
    """What scores a batch, wherever the rewards run: :class:`~rewardhub.execution.Runner` (in this
    process), :class:`~rewardhub.distributed.RewardWorkerPool` (on Ray reward workers),
    :class:`~rewardhub.execution.remote.RemoteScorer` (on a ``rewardhub serve`` server). Open one with
    :func:`~rewardhub.execution.open_scorer`, the one place that chooses."""

    @property
    def aggregation(self) -> str:
        """How the terms' rewards become a sample's score (``reward.aggregation``)."""
        ...

    @property
    def facts(self) -> Sequence[TermFacts]:
        """Its terms: name, executor, ``on_failure``, weight, the sample fields each reads."""
        ...

    #: whether ``score``'s ``cancel`` drops the calls not started (a Runner's own calls); a server or a
    #: pool scores what it was sent, so its caller keeps what comes back instead
    cancels: bool

    def provenance(self) -> list[dict[str, Any]]:
        """Where each term's reward came from and what ran it (what ``--summary-json`` writes)."""
        ...

    def pool_figures(self) -> list[dict[str, Any]]:
        """Each Ray pool it scores on: workers (min, max, now), queue wait p50/p99, calls re-dispatched,
        replicas replaced (``--summary-json``'s ``pools``); none: ``[]``."""
        ...

    def score(self, samples: Sequence[Mapping[str, Any]], progress: Callable[[int, int], None] | None = None,
              *, indices: Sequence[int] | None = None, defer_raise: bool = False,
              cancel: Any = None) -> ScoreResult:
        """One row per sample, in input order; a failed call is an error (with its kind), never a score.

        :param progress: called with (done, total) as the batch goes.
        :param indices: each sample's number in error messages (its row in a larger input).
        :param defer_raise: ``on_failure: raise`` gives the failed samples NaN and keeps their failure,
            for a caller that pooled several callers' samples and fails only those at fault.
        :param cancel: a :class:`~rewardhub.execution.Cancel` the caller sets once nobody waits (a client
            went away, a signal): the calls not started are dropped (a Runner's; a server or a pool scores
            what it was sent)."""
        ...

    def close(self) -> None:
        """Stop what scoring started (processes, workers); the results stay readable."""
        ...


def apply_on_failure(name: str, on_failure: str, col: Column) -> None:
    """Give every failed sample of term ``name`` its ``on_failure`` value (or raise, naming the first)."""
    failed = col.failures()
    if not failed:
        return
    if on_failure == "raise":
        raise failure_error(name, col, failed[0])
    value = 0.0 if on_failure == "zero" else math.nan if on_failure == "nan" else None
    for i in failed:
        col.values[i] = value


def failure_error(name: str, col: Column, i: int) -> RewardExecutionError:
    """The error that ``on_failure: raise`` raises for term ``name``'s failed sample ``i``."""
    return RewardExecutionError(
        f"{col.errors[i]}\n(on_failure: raise for reward {name!r}; use zero, nan or drop to go on)",
        reward=name, index=col.label(i), where=col.where.get(i))


def apply_on_failure_to_outcomes(name: str, on_failure: str, outs: list[Outcome]) -> None:
    """:func:`apply_on_failure` for a list of :class:`Outcome` (changed in place)."""
    col = Column.from_outcomes(outs)
    apply_on_failure(name, on_failure, col)
    for i in col.failures():
        outs[i].value = col.values[i]


def aggregate(weights: Sequence[tuple[str, float]], aggregation: str,
              outcomes: Mapping[str, Sequence[Outcome]], n: int) -> ScoreResult:
    """:func:`combine` for per-term :class:`Outcome` lists (one outcome per sample, ``n`` samples)."""
    return combine(
        weights, aggregation, n, {name: Column.from_outcomes(outcomes[name]) for name, _ in weights}
    )


def combine(weights: Sequence[tuple[str, float]], aggregation: str, n: int,
            columns: Mapping[str, Column]) -> ScoreResult:
    """Aggregate the terms' columns (``weights``: term name and weight, in the config's order)."""
    cols = [(w, columns[name]) for name, w in weights]
    term_stats = {name: stats(columns[name].values, columns[name].has_none()) for name, _ in weights}
    values = [c.values for _, c in cols]
    if aggregation == "normalize_then_sum":
        values = [_normalized(vs, term_stats[name]) for (name, _), vs in zip(weights, values)]
    simple = not any(c.has_none() for _, c in cols)
    ws = [w for w, _ in cols]
    scores: list[float | None]
    if simple and len(cols) == 1:  # one term, a value for every sample: no per-sample work
        scores = list(values[0]) if ws[0] == 1.0 else list(map(operator.mul, values[0], repeat(ws[0], n)))
    elif simple and cols:
        scores = [sum(map(operator.mul, vs, ws)) for vs in zip(*values)]
    else:
        scores = []
        for vs in zip(*values) if values else ((),) * n:
            parts = [w * v for w, v in zip(ws, vs) if v is not None]
            scores.append(sum(parts) if parts else None)
    if len(cols) == 1 and simple and aggregation == "weighted_sum":
        mean, std, count = term_stats[weights[0][0]]
        agg = (mean * ws[0], std * abs(ws[0]), count)
    else:
        agg = stats(scores)
    metrics: dict[str, float] = {"reward/mean": agg[0], "reward/std": agg[1], "reward/count": float(agg[2])}
    for name, _ in weights:
        metrics.update(column_metrics(name, columns[name], term_stats[name]))
    return ScoreResult(scores, dict(columns), metrics)


def _normalized(vs: list[float | None], term_stats: tuple[float, float, int]) -> list[float | None]:
    mean, std, _ = term_stats
    mean = 0.0 if math.isnan(mean) else mean
    return [None if v is None else (v - mean) / std if std > 1e-12 else v - mean for v in vs]
