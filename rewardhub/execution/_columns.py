"""One term's results on one batch, stored column-wise: values in a list, everything rare in sparse dicts."""

from __future__ import annotations

import heapq
import math
import operator
from collections.abc import Iterable
from collections.abc import Sequence
from itertools import repeat
from typing import Any

from ..types import sample_name
from ._outcome import ERROR
from ._outcome import NOT_APPLICABLE
from ._outcome import OK
from ._outcome import TIMEOUT
from ._outcome import Outcome
from ._outcome import check_value
from ._where import split_error

__all__ = ["COUNTED", "Column", "column_metrics", "stats"]

#: above this many values, std is taken in one pass (last-bit rounding may differ from two passes)
_ONE_PASS_FROM = 10_000


class Column:
    """What one term gave each sample of a batch.

    ``values[i]`` is the score (``None``: not applicable, or dropped after a failure). Samples
    missing from ``status`` are ``ok``; ``errors``, ``extra`` and ``attempts`` hold only the
    samples that have one (``where``: the frames of the reward's own code where a call raised).
    ``timed`` lists the seconds of every timed call, per sample (a batched call's time shared among
    its samples): what the latency percentiles are taken over. ``cache``: for a term with ``cache`` on,
    whether each sample it scored made no call of its own (a hit).
    """

    __slots__ = ("values", "status", "errors", "where", "extra", "_latency", "timed", "attempts", "labels",
                 "cache")

    def __init__(self, n: int, labels: Sequence[int] | None = None) -> None:
        self.values: list[float | None] = [None] * n
        self.status: dict[int, str] = {}
        self.errors: dict[int, str] = {}
        self.where: dict[int, str] = {}
        self.extra: dict[int, dict[str, Any]] = {}
        self._latency: list[float] | None = [0.0] * n
        self.timed: list[float] = []
        self.attempts: dict[int, int] = {}
        self.cache: dict[int, bool] = {}
        #: the samples' positions in the caller's batch (``None``: the same as here), named in
        #: error messages and carried by :meth:`outcomes`
        self.labels = labels

    def label(self, i: int) -> int:
        """Sample ``i``'s position in the caller's batch."""
        return i if self.labels is None else self.labels[i]

    def __len__(self) -> int:
        return len(self.values)

    @property
    def latency(self) -> list[float]:
        """Seconds per sample; a column whose ``timed`` are the samples' own, in order (the inline
        fast path's) builds it from them when first asked."""
        if self._latency is None:
            self._latency = list(self.timed)
        return self._latency

    def latency_is_timed(self) -> None:
        """Declare ``timed`` to hold every sample's time, in sample order."""
        self._latency = None

    def slowest(self, k: int) -> list[tuple[int, float]]:
        """The ``k`` samples that took longest: ``(index, seconds)``, the slowest first."""
        lat = self.timed if self._latency is None else self._latency
        top = heapq.nlargest(k, zip(lat, range(len(lat))))
        return [(i, x) for x, i in top if x > 0.0]

    # ---- filling ------------------------------------------------------------------------
    def not_applicable(self, indices: Iterable[int]) -> None:
        for i in indices:
            self.status[i] = NOT_APPLICABLE

    def put(self, i: int, raw: Any, reward: str, latency: float, attempts: int = 1) -> None:
        """Check one returned value and store it (anything but a finite score is an error)."""
        if type(raw) is float and raw - raw == 0.0 and attempts == 1:  # a finite float: nothing to check
            self.values[i] = raw
            self.latency[i] = latency
            self.timed.append(latency)
            return
        self._store(i, check_value(raw, reward, self.label(i)), latency, attempts, timed=True)

    def set_error(self, i: int, text: str, where: str | None = None) -> None:
        """Sample ``i``'s error: the message in ``errors``, the frames it carries (or ``where``) in
        ``where``."""
        message, frames = split_error(text)
        self.errors[i] = message
        if frames or where:
            self.where[i] = frames or where or ""

    def fail(self, i: int, status: str, error: str, latency: float, attempts: int = 1) -> None:
        self.values[i] = None
        self.status[i] = status
        self.set_error(i, error)
        self.latency[i] = latency
        self.timed.append(latency)
        if attempts != 1:
            self.attempts[i] = attempts

    def put_outcome(self, i: int, o: Outcome) -> None:
        """``o`` at ``i``; a cache hit made no call, so its latency is not one of ``timed``."""
        timed = not o.cache_hit and (o.status != NOT_APPLICABLE or bool(o.latency_s))
        self._store(i, o, o.latency_s, o.attempts, timed=timed)

    def _store(self, i: int, o: Outcome, latency: float, attempts: int, timed: bool) -> None:
        """``o``'s value, status, error and extra at ``i``; ``timed``: its latency counts in ``timed``."""
        self.values[i] = o.value
        if o.status != OK:
            self.status[i] = o.status
        if o.error is not None:
            self.set_error(i, o.error, o.where)
        if o.extra:
            self.extra[i] = o.extra
        self.latency[i] = latency
        if timed:
            self.timed.append(latency)
        if attempts != 1:
            self.attempts[i] = attempts
        if o.cache_hit is not None:
            self.cache[i] = o.cache_hit

    @classmethod
    def from_outcomes(cls, outs: Sequence[Outcome]) -> Column:
        col = cls(len(outs))
        for i, o in enumerate(outs):
            col.put_outcome(i, o)
        return col

    def outcomes(self) -> list[Outcome]:
        st, er, ex, at, wh = self.status, self.errors, self.extra, self.attempts, self.where
        lat = self.latency
        return [Outcome(v, st.get(i, OK), ex.get(i, {}), er.get(i), lat[i], at.get(i, 1), self.label(i),
                        wh.get(i), self.cache.get(i)) for i, v in enumerate(self.values)]

    def extend(self, other: Column) -> None:
        """Append another batch's column (indices shift by this one's length)."""
        off = len(self.values)
        self.values.extend(other.values)
        self.latency.extend(other.latency)
        self.timed.extend(other.timed)
        for sparse in ("status", "errors", "where", "extra", "attempts", "cache"):
            getattr(self, sparse).update({i + off: v for i, v in getattr(other, sparse).items()})

    def store_call(self, name: str, unit: list[int], mode: str, res: tuple[str, Any, float], attempts: int
                   ) -> None:
        """What one call of reward ``name`` on the samples ``unit`` gave (``res``: status, value or error,
        latency): one score (``mode`` ``one``) or a list of as many (``many``); a failure fails them all."""
        status, value, latency = res
        if status != "ok":
            for i in unit:
                self.fail(i, TIMEOUT if status == "timeout" else ERROR,
                          f"reward {name!r} on {sample_name(self.label(i))}: {value}",
                          latency / max(1, len(unit)), attempts)
            return
        if mode == "one":
            self.put(unit[0], value, name, latency, attempts)
            return
        if not isinstance(value, (list, tuple)) or len(value) != len(unit):
            got = f"{type(value).__name__} of length {len(value)}" if isinstance(value, (list, tuple)) \
                else repr(value)[:60]
            for i in unit:
                self.fail(i, ERROR, f"batched reward {name!r} returned {got} for {len(unit)} samples "
                                    f"({sample_name(self.label(i))})", latency / len(unit), attempts)
            return
        for i, raw in zip(unit, value):
            self.put(i, raw, name, latency / len(unit), attempts)

    # ---- policy -------------------------------------------------------------------------
    def failures(self) -> list[int]:
        return sorted(i for i, s in self.status.items() if s in (ERROR, TIMEOUT))

    def has_none(self) -> bool:
        """Whether some value is ``None`` (not applicable or dropped)."""
        values = self.values
        return any(values[i] is None for i in self.status)


def _percentiles(values: list[float], qs: Sequence[float]) -> list[float]:
    """Linear-interpolated percentiles of ``values`` (sorted once for all)."""
    if not values:
        return [math.nan for _ in qs]
    ordered = sorted(values)
    out = []
    for q in qs:
        k = (len(ordered) - 1) * q / 100.0
        lo, hi = math.floor(k), math.ceil(k)
        a, b = ordered[lo], ordered[hi]
        out.append(a if lo == hi else a + (b - a) * (k - lo))
    return out


def stats(values: list[Any], may_have_none: bool = True) -> tuple[float, float, int]:
    """Mean and (population) std of the non-None values, NaN skipped; and how many are not None."""
    vals = [v for v in values if v is not None] if may_have_none else values
    count = len(vals)
    if not count:
        return math.nan, math.nan, 0
    try:
        total = sum(vals)
    except TypeError:
        total = math.nan
    if not math.isfinite(total):  # NaN, inf, or finite values whose sum passes the float range
        finite = [float(v) for v in vals if not math.isnan(v)]
        if not finite:
            return math.nan, math.nan, count
        try:
            mean = math.fsum(finite) / len(finite)
        except OverflowError:  # 1e308 + 1e308: the mean of the scaled values is in range
            mean = math.fsum(v / len(finite) for v in finite)
        except ValueError:  # inf and -inf
            return math.nan, math.nan, count
        return mean, _std(finite, mean), count
    mean = total / count
    if count > _ONE_PASS_FROM:  # one pass in C (hypot is the root of the sum of squares)
        var = math.hypot(*vals) ** 2 / count - mean * mean
        if var > 1e-9 * mean * mean and var != math.inf:
            return mean, math.sqrt(var), count
    # two passes: exact to the last bits, and safe from cancellation
    var = sum(d * d for d in map(operator.sub, vals, repeat(mean, count))) / count
    if var == math.inf:  # squares past the float range (values beyond 1e154)
        return mean, _std(vals, mean), count
    return mean, math.sqrt(max(var, 0.0)), count


def _std(vals: list[Any], mean: float) -> float:
    """The population std of ``vals`` about ``mean``, with every deviation scaled by the largest, so
    that no square overflows (a finite std of huge values stays finite; inf in them gives inf or NaN)."""
    devs = [float(v) - mean for v in vals]
    scale = max(map(abs, devs))
    if scale == 0.0:
        return 0.0
    if not math.isfinite(scale):
        return math.sqrt(sum(d * d for d in devs) / len(devs))
    return scale * math.sqrt(math.fsum((d / scale) ** 2 for d in devs) / len(devs))


#: extra keys that are counts (a judge's calls, tokens and failed calls): summed, not averaged
COUNTED = frozenset({"judge_calls", "judge_tokens", "judge_failed"})


def column_metrics(
    name: str, col: Column, precomputed: tuple[float, float, int] | None = None
) -> dict[str, float]:
    """Flat ``rewards/<name>/<metric>`` values: mean, std, count, errors, timeouts, latency p50/p99, and
    for a term with ``cache`` on ``cache_hits`` (samples that made no call of their own) and ``cache_misses``.

    ``mean``/``std``/``count`` cover the values the samples got (failure values included, NaN
    skipped); latencies are seconds per call; numeric extra keys are averaged over ok samples, but the
    :data:`COUNTED` ones are summed over all samples but cache hits.
    """
    mean, std, count = precomputed or stats(col.values, col.has_none())
    statuses = list(col.status.values())
    p50, p99 = _percentiles(col.timed, (50, 99))
    m: dict[str, float] = {
        "mean": mean,
        "std": std,
        "count": float(count),
        "errors": float(statuses.count(ERROR)),
        "timeouts": float(statuses.count(TIMEOUT)),
        "latency_p50": p50,
        "latency_p99": p99,
    }
    if col.cache:
        hits = sum(col.cache.values())
        m["cache_hits"], m["cache_misses"] = float(hits), float(len(col.cache) - hits)
    extras: dict[str, list[float]] = {}
    for i, ex in col.extra.items():
        if i in col.status or ex.keys() & COUNTED:
            for k in ex.keys() & COUNTED:  # counts: summed over every sample that made calls, failed or not
                if not col.cache.get(i) and isinstance(ex[k], (int, float)):
                    m[k] = m.get(k, 0.0) + float(ex[k])
            if i in col.status:
                continue
        for k, v in ex.items():
            if isinstance(v, (int, float)) and k not in COUNTED:
                extras.setdefault(str(k), []).append(float(v))
    for k, vs in extras.items():
        if k not in m:
            m[k] = sum(vs) / len(vs)
    return {f"rewards/{name}/{k}": v for k, v in m.items()}
