"""The statistics of judge calibration: Cohen's kappa, Spearman's rho, Kendall's tau (no numpy)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable
from collections.abc import Sequence

__all__ = ["cohen_kappa", "kendall_tau", "ranks", "spearman_rho"]


def cohen_kappa(gold: Sequence[Hashable], pred: Sequence[Hashable]) -> float:
    """Agreement beyond chance: 1 perfect, 0 chance, below 0 worse than chance (``nan``: < 2 rows)."""
    n = len(gold)
    if n < 2:
        return math.nan
    observed = sum(g == p for g, p in zip(gold, pred)) / n
    cg, cp = Counter(gold), Counter(pred)
    expected = sum(cg[k] * cp.get(k, 0) for k in cg) / (n * n)
    return 1.0 if expected == 1.0 else (observed - expected) / (1.0 - expected)


def ranks(xs: Sequence[float]) -> list[float]:
    """1-based ranks, ties given their mean rank."""
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    out = [0.0] * len(xs)
    k = 0
    while k < len(order):
        j = k
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[k]]:
            j += 1
        for m in range(k, j + 1):
            out[order[m]] = (k + j) / 2 + 1
        k = j + 1
    return out


def _pearson(a: Sequence[float], b: Sequence[float]) -> float:
    n = len(a)
    if n < 2:
        return math.nan
    ma, mb = sum(a) / n, sum(b) / n
    sab = sum((x - ma) * (y - mb) for x, y in zip(a, b))
    sa = math.sqrt(sum((x - ma) ** 2 for x in a))
    sb = math.sqrt(sum((y - mb) ** 2 for y in b))
    return sab / (sa * sb) if sa > 0 and sb > 0 else math.nan


def spearman_rho(a: Sequence[float], b: Sequence[float]) -> float:
    """Rank correlation (``nan`` where either side is constant)."""
    return _pearson(ranks(a), ranks(b))


def kendall_tau(a: Sequence[float], b: Sequence[float]) -> float:
    """Kendall's tau-b."""
    conc = disc = ta = tb = 0
    for i in range(len(a)):
        for j in range(i + 1, len(a)):
            da, db = a[i] - a[j], b[i] - b[j]
            if da == 0 and db == 0:
                continue
            if da == 0:
                ta += 1
            elif db == 0:
                tb += 1
            elif (da > 0) == (db > 0):
                conc += 1
            else:
                disc += 1
    denom = math.sqrt((conc + disc + ta) * (conc + disc + tb))
    return (conc - disc) / denom if denom else math.nan
