"""One reward call's outcome, and checking what a reward returned."""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from dataclasses import field
from typing import Any

from ..errors import RewardhubError
from ..types import sample_name

__all__ = ["Outcome", "check_value", "error_kind_of", "error_text", "noting_bools", "short"]

#: while :func:`noting_bools` runs: the rewards seen returning a Python ``bool`` in this process
_bools: set[str] | None = None


@contextlib.contextmanager
def noting_bools() -> Iterator[set[str]]:
    """The names of the rewards that return a Python ``bool`` (scored 1.0 / 0.0) in this process while
    this runs: ``rewardhub test`` reports them, as it reports numpy's ``bool_`` (not a score)."""
    global _bools
    seen: set[str] = set()
    before, _bools = _bools, seen
    try:
        yield seen
    finally:
        _bools = before

#: outcome statuses
OK, NOT_APPLICABLE, ERROR, TIMEOUT = "ok", "na", "error", "timeout"
_KIND = re.compile(r"(?:^|: )\w+\[(\w+)\]: ")


def error_kind_of(status: str, error: str | None) -> str:
    """A failed sample's error kind: ``timeout``, the kind its exception carried (see :func:`error_text`),
    or ``error``."""
    if status == ERROR and error:
        m = _KIND.search(error)
        if m:
            return m.group(1)
    return status


def error_text(exc: BaseException) -> str:
    """How a failed call's exception reads in its outcome: ``Type: message`` (``Type[kind]: message`` for a
    :class:`~rewardhub.errors.RewardhubError` with a ``kind`` of its own, e.g. a grader's error flag,
    which becomes the row's error kind: :func:`error_kind_of`), then (after
    :data:`~rewardhub.execution._where.MARK`) the last frames of the reward's own code."""
    from ._where import MARK
    from ._where import reward_frames

    kind = getattr(exc, "kind", None)
    if isinstance(exc, SystemExit):
        text = f"SystemExit: the reward called sys.exit({exc.code!r})"
    elif isinstance(kind, str) and kind not in ("error", ERROR, TIMEOUT) and isinstance(exc, RewardhubError):
        text = f"{type(exc).__name__}[{kind}]: {exc}"  # the kind rides in the text across processes
    else:
        text = f"{type(exc).__name__}: {exc}"
    frames = reward_frames(exc)
    return f"{text}{MARK}{frames}" if frames else text


@dataclass(slots=True)
class Outcome:
    """What one term gave one sample.

    :ivar value: the score, ``None`` when not applicable (or dropped after a failure).
    :ivar status: ok | na | error | timeout.
    :ivar index: the sample's position in the batch of whoever asked for the scores (a Ray reward
        worker scores a part of the driver's batch: these are the driver's positions).
    """

    value: float | None
    status: str = OK
    extra: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    latency_s: float = 0.0
    attempts: int = 1
    index: int | None = None
    #: where a failed call failed: the last frames of the reward's own code (see ``_where``)
    where: str | None = None
    #: for a term with ``cache`` on: whether the sample made no call of its own (``None``: no cache)
    cache_hit: bool | None = None

    def to_wire(self) -> tuple[Any, ...]:
        return (self.value, self.status, self.extra, self.error, self.latency_s, self.attempts, self.index,
                self.where, self.cache_hit)

    @classmethod
    def from_wire(cls, t: tuple[Any, ...]) -> Outcome:
        return cls(*t)


def _finite(x: Any, reward: str) -> float | None:
    """A score ``x`` of ``reward`` as a finite float (a Python ``bool`` is noted: :func:`noting_bools`)."""
    if type(x) is bool and _bools is not None:
        _bools.add(reward)
    if not isinstance(x, (int, float)):
        import numbers

        if not isinstance(x, numbers.Real):  # numpy / torch scalars are
            return None
    try:
        f = float(x)
    except (TypeError, ValueError, OverflowError):  # an int past a float's range (10**400)
        return None
    return f if math.isfinite(f) else None


def check_value(raw: Any, reward: str, index: int | None) -> Outcome:
    """Turn a reward's return value into an :class:`Outcome`; anything but a finite score is an error.

    ``None`` means not applicable; a dict must carry a finite ``score`` and its other keys become
    extra metrics; ``{"score": None, "failed": MESSAGE, ...}`` is a failure that keeps its extras.
    """
    if type(raw) is float and raw - raw == 0.0:  # the common case: a finite float (NaN and inf fail this)
        return Outcome(raw, OK)
    if raw is None:
        return Outcome(None, NOT_APPLICABLE)
    if isinstance(raw, dict):
        if "score" not in raw:
            who = _reward_label(reward, index)
            return Outcome(None, ERROR, error=f"{who} returned a dict without 'score': {short(raw)}")
        score = raw["score"]
        if score is None:
            rest = {k: v for k, v in raw.items() if k not in ("score", "failed")}
            if isinstance(raw.get("failed"), str):  # a failure that keeps its extras (a judge's counts)
                return Outcome(None, ERROR, extra=rest, error=raw["failed"])
            return Outcome(None, NOT_APPLICABLE, extra=rest)
        value = _finite(score, reward)
        if value is None:
            who = _reward_label(reward, index)
            return Outcome(None, ERROR, error=f"{who} returned score {short(score)}: not a finite number")
        return Outcome(value, OK, extra={k: v for k, v in raw.items() if k != "score"})
    value = _finite(raw, reward)
    if value is None:
        who = _reward_label(reward, index)
        return Outcome(None, ERROR, error=f"{who} returned {short(raw)}: not a finite number "
                                          "or a dict with a finite 'score'")
    return Outcome(value, OK)


def _reward_label(reward: str, index: int | None) -> str:
    """How an error message names the failing reward (and its sample, when known)."""
    return f"reward {reward!r} on {sample_name(index)}" if index is not None else f"reward {reward!r}"


def short(x: Any, width: int = 80) -> str:
    """``repr(x)``, cut to ``width`` characters."""
    r = repr(x)
    return r if len(r) <= width else r[:width - 3] + "..."
