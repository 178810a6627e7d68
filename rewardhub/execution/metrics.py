"""Per-reward metrics: mean, std, count, errors, timeouts, latency percentiles."""

from __future__ import annotations

import math
from collections.abc import Iterable
from collections.abc import Sequence
from typing import Any

from ._outcome import ERROR
from ._outcome import OK
from ._outcome import TIMEOUT
from ._outcome import Outcome

__all__ = ["percentile", "term_metrics", "METRIC_KEYS"]

METRIC_KEYS = ("mean", "std", "count", "errors", "timeouts", "latency_p50", "latency_p99")


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (``q`` in 0..100); NaN for no values."""
    if not values:
        return math.nan
    xs = sorted(values)
    k = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] if lo == hi else xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    finite = [v for v in values if not math.isnan(v)]
    if not finite:
        return math.nan, math.nan
    mean = sum(finite) / len(finite)
    var = sum((v - mean) ** 2 for v in finite) / len(finite)
    return mean, math.sqrt(var)


def term_metrics(name: str, outcomes: Iterable[Outcome]) -> dict[str, float]:
    """Flat ``rewards/<name>/<metric>`` values for one term's outcomes on one batch.

    ``mean``/``std``/``count`` cover the values the samples got (failure values included, NaN
    skipped); ``errors`` and ``timeouts`` count failures; latencies are seconds.
    Numeric extra keys of dict returns are averaged as ``rewards/<name>/<key>``.
    """
    outs = list(outcomes)
    values = [o.value for o in outs if o.value is not None]
    mean, std = _mean_std(values)
    lat = [o.latency_s for o in outs if o.status != "na"]
    m: dict[str, float] = {
        "mean": mean,
        "std": std,
        "count": float(len(values)),
        "errors": float(sum(o.status == ERROR for o in outs)),
        "timeouts": float(sum(o.status == TIMEOUT for o in outs)),
        "latency_p50": percentile(lat, 50),
        "latency_p99": percentile(lat, 99),
    }
    extras: dict[str, list[float]] = {}
    for o in outs:
        if o.status != OK:
            continue
        for k, v in o.extra.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) or isinstance(v, bool):
                extras.setdefault(str(k), []).append(float(v))
    for k, vs in extras.items():
        if k not in m:
            m[k] = sum(vs) / len(vs)
    return {f"rewards/{name}/{k}": v for k, v in m.items()}


def aggregate_metrics(scores: Sequence[Any]) -> dict[str, float]:
    vals = [float(s) for s in scores if s is not None]
    mean, std = _mean_std(vals)
    return {"reward/mean": mean, "reward/std": std, "reward/count": float(len(vals))}
