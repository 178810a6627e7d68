"""Self-consistency: ``samples`` verdicts of one question, one number (``aggregate``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from ...errors import UsageError

__all__ = ["AGGREGATES", "check_voting", "vote"]

AGGREGATES = ("mean", "median", "majority")


def vote(values: Sequence[float], aggregate: str) -> float:
    """``mean``, ``median``, or ``majority`` (the most frequent value; a split between the most frequent
    values is their mean, so two orders or two samples that disagree make a tie, not a win)."""
    import statistics  # here: its import costs every CLI start ~3 ms

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


def check_voting(reward: str, samples: Any, aggregate: str, template: str, needs: tuple[str, ...]) -> None:
    """The kwargs every judging mode shares, checked before any call.

    :raises UsageError: ``samples`` not a whole number >= 1, an unknown ``aggregate``, or a ``template``
        without one of the placeholders ``needs`` (the judge would not see what it grades).
    """
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise UsageError(f"{reward} samples={samples!r} is not valid\ngive a whole number >= 1")
    if aggregate not in AGGREGATES:
        raise UsageError(f"{reward} aggregate={aggregate!r} is not valid\nallowed: {', '.join(AGGREGATES)}")
    missing = [p for p in needs if "{" + p + "}" not in template]
    if missing:
        raise UsageError(f"{reward}: the template has no {', '.join('{' + p + '}' for p in missing)}\n"
                         "the judge would not see what it grades; put each in the template")
