"""The inline fast path: a per-sample sync reward called in one tight loop, results kept as arrays.

For each reward signature a small loop is generated that reads exactly the sample fields the
reward takes (``s["response"]``, ...) and calls it with them as keywords, as a hand-written loop
would. Nothing is allocated per sample besides the reward's own return value; time is taken per
block of calls. A call that raises, or a sample that lacks a field, leaves the loop at that
sample: it is handled on its own (slow path) and the loop goes on after it.
"""

from __future__ import annotations

import itertools
import operator
import time
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from ..types import sample_name
from ._calls import FIELDS
from ._calls import FIXED
from ._calls import Invoker
from ._calls import check_sample
from ._calls import copy_field
from ._columns import Column
from ._local import interrupts_told_apart
from ._local import reward_exit
from ._outcome import ERROR
from ._outcome import OK
from ._outcome import check_value
from ._outcome import error_text

__all__ = ["fast_eligible", "run_fast", "run_fast_until"]

_VERL = {"data_source": "data_source", "solution_str": "response", "ground_truth": "ground_truth",
         "extra_info": "extra_info"}
_TEMPLATE = """
def loop(fn, batch, out, ends, kw, pc):
    ap = out.append
    at = ends.append
    fixed, copy, type = FIXED, COPY, TYPE
    try:
        for s in batch[len(out):]:
            {check}ap(fn({args}))
            at(pc())
    except BaseException as exc:
        if not isinstance(exc, Exception) and not reward_exit(exc):
            raise
        return exc
    return None
"""
_cache: dict[tuple[Any, ...], Any] = {}


def fast_eligible(inv: Invoker) -> bool:
    return (inv.kind == "function" and not inv.is_async and inv.adapter in ("rewardhub", "verl")
            and not inv.messages)


def _plan(inv: Invoker, kwargs: Mapping[str, Any]) -> tuple[list[tuple[str, str]], dict[str, Any]]:
    """(keyword, sample field) pairs read from each sample, and the constant keywords."""
    mapping = _VERL if inv.adapter == "verl" else {f: f for f in FIELDS}

    def accepts(keyword: str) -> bool:
        return inv.var_kw or keyword in inv.names

    pairs = [(kw, field) for kw, field in mapping.items() if accepts(kw) and kw not in kwargs]
    return pairs, {k: v for k, v in kwargs.items() if accepts(k)}


def _compile(pairs: list[tuple[str, str]], constants: bool, lenient: bool) -> Any:
    key = (tuple(pairs), constants, lenient)
    if key not in _cache:
        def read(k: int, field: str) -> str:
            get = f"s.get({field!r})" if lenient and field != "response" else f"s[{field!r}]"
            # the call's own copy of what it could change (a string is handed over as it is, an
            # empty extra_info is a new empty dict)
            v = f"v{k}"
            return (f"({v} if (ty := type({v} := {get})) in fixed "
                    f"else {{}} if ty is dict and not {v} else copy({v}))")

        args = [f"{kw}={read(k, field)}" for k, (kw, field) in enumerate(pairs)]
        args += ["**kw"] if constants else []
        check = "" if any(f == "response" for _, f in pairs) else 's["response"]; '
        ns: dict[str, Any] = {"reward_exit": reward_exit, "FIXED": FIXED, "COPY": copy_field, "TYPE": type}
        exec(
            compile(_TEMPLATE.format(check=check, args=", ".join(args)), "<rewardhub fast loop>", "exec"), ns
        )
        _cache[key] = ns["loop"]
    return _cache[key]


_FAILED = object()


def run_fast(inv: Invoker, batch: list[Any], kwargs: Mapping[str, Any], name: str, retries: int,
             labels: Sequence[int] | None = None) -> Column:
    """Call ``inv`` on every sample of ``batch`` in this thread; one column of results.

    :param labels: the samples' positions in the caller's batch (see :attr:`Column.labels`).
    """
    with interrupts_told_apart():
        return _run_fast(inv, batch, kwargs, name, retries, labels)


def _run_fast(inv: Invoker, batch: list[Any], kwargs: Mapping[str, Any], name: str, retries: int,
              labels: Sequence[int] | None) -> Column:
    pairs, constants = _plan(inv, kwargs)
    loop = _compile(pairs, bool(constants), lenient=False)
    fn, pc = inv.fn, time.perf_counter
    n = len(batch)
    col = Column(0, labels)
    out: list[Any] = []
    ends = [pc()]  # when each call ended (the next one's start), after when the first began
    failed: dict[int, tuple[str, int]] = {}  # index -> (error, attempts)
    retried: dict[int, int] = {}  # index -> attempts, for calls that succeeded on a retry
    while True:
        exc = loop(fn, batch, out, ends, constants, pc)
        if exc is None:
            break
        i = len(out)
        s = batch[i]
        if not isinstance(s, Mapping) or any(field not in s for _, field in pairs):
            s = check_sample(s, col.label(i))  # a bad sample stops the batch with its name
            loop = _compile(pairs, bool(constants), lenient=True)  # optional fields may be missing
            attempts, error = 0, None
        else:  # the reward itself raised
            attempts, error = 1, error_text(exc)
        while attempts <= retries or attempts == 0:
            attempts += 1
            try:
                raw = inv.call_one(s, kwargs)
                error = None
                break
            except BaseException as again:
                if not isinstance(again, Exception) and not reward_exit(again):
                    raise
                error = error_text(again)
        ends.append(pc())
        if error is None:
            out.append(raw)
            if attempts != 1:
                retried[i] = attempts
        else:
            out.append(_FAILED)
            failed[i] = (f"reward {name!r} on {sample_name(col.label(i))}: {error}", attempts)
    col.timed = list(map(operator.sub, itertools.islice(ends, 1, None), ends))  # each call's seconds
    col.latency_is_timed()  # one time per sample, in sample order
    col.attempts.update(retried)
    try:
        total = sum(out)
    except Exception:  # not all numbers
        total = None
    if type(total) is float and total - total == 0.0 and n:  # all finite numbers (checked in C)
        col.values = list(map(float, out))
        return col
    # something else came back: check each value on its own
    col.values = [None] * n
    values, status, errors, extra, attempts_of = col.values, col.status, col.errors, col.extra, col.attempts
    for i, raw in enumerate(out):
        if raw is _FAILED:
            status[i] = ERROR
            text, a = failed[i]
            col.set_error(i, text)
            if a != 1:
                attempts_of[i] = a
            continue
        if type(raw) is float and raw - raw == 0.0:
            values[i] = raw
            continue
        o = check_value(raw, name, col.label(i))
        values[i] = o.value
        if o.status != OK:
            status[i] = o.status
        if o.error is not None:
            errors[i] = o.error
        if o.extra:
            extra[i] = o.extra
    return col



def run_fast_until(inv: Invoker, batch: list[Any], kwargs: Mapping[str, Any], name: str, retries: int,
                   labels: Sequence[int] | None, cancel: Any, col: Column) -> None:
    """:func:`run_fast` into ``col`` in slices of about 20 ms of calls (1 sample first, then doubled or
    halved by the time the last took), none started once ``cancel`` (a :class:`~rewardhub.execution.Cancel`)
    is set: then ``col`` holds the first samples, those scored."""
    k, size = 0, 1
    named = labels if labels is not None else list(range(len(batch)))
    while k < len(batch) and not cancel.is_set():
        part = batch[k:k + size]
        began = time.perf_counter()
        col.extend(run_fast(inv, part, kwargs, name, retries, named[k:k + size]))
        took = time.perf_counter() - began
        k, size = k + len(part), (min(2 * size, 1 << 16) if took < 0.02 else max(1, size // 2) if took > 0.05
                                  else size)
