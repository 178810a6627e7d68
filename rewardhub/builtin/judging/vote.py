"""Self-consistency: ``samples`` verdicts of one question, one number (``aggregate``)."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence

from ...errors import UsageError

__all__ = ["AGGREGATES", "vote"]

AGGREGATES = ("mean", "median", "majority")


def vote(values: Sequence[float], aggregate: str) -> float:
    """``mean``, ``median``, or ``majority`` (the most frequent value; a split between the most frequent
    values is their mean, so two orders or two samples that disagree make a tie, not a win)."""
    if not values:
        raise ValueError("no values to aggregate")
    if aggregate == "mean":
        return statistics.fmean(values)
    if aggregate == "median":
        return float(statistics.median(values))
    if aggregate == "majority":
        counts = Counter(values).most_common()
        top = [v for v, c in counts if c == counts[0][1]]
        return statistics.fmean(top)
    raise UsageError(f"aggregate={aggregate!r} is not valid\nallowed: {', '.join(AGGREGATES)}")
