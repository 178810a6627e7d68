"""How ``rewardhub score`` reports the calls that failed: per reward, how many, the first error and
where in the reward's code it was raised (``--summary-json``, ``--debug``), and whether the run
failed (``--max-error-rate``) or deserves a warning (``--warn-error-rate``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["WARN_ERROR_RATE", "debug_lines", "drop_note", "drop_notes", "failure_report", "over_the_limit",
           "warnings_over"]

#: the share of a reward's rows that may fail before ``score`` warns (``--warn-error-rate``)
WARN_ERROR_RATE = 0.1


def failure_report(columns: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Per reward with a failed call: ``rows`` it applied to, ``errors``, ``timeouts``, ``error_rate``
    (failed / applied) and its ``first`` failure (``sample``: its 0-based place in the input, ``error``,
    ``traceback``: the last frames of the reward's own code, or null)."""
    from ..execution import ERROR
    from ..execution import NOT_APPLICABLE
    from ..execution import TIMEOUT

    out: dict[str, dict[str, Any]] = {}
    for name, col in columns.items():
        failed = col.failures()
        if not failed:
            continue
        statuses = list(col.status.values())
        applied = len(col) - statuses.count(NOT_APPLICABLE)
        i = failed[0]
        out[name] = {"rows": applied, "errors": statuses.count(ERROR), "timeouts": statuses.count(TIMEOUT),
                     "error_rate": len(failed) / max(applied, 1),
                     "first": {"sample": col.label(i), "error": col.errors.get(i),
                               "traceback": col.where.get(i)}}
    return out


def over_the_limit(report: Mapping[str, Mapping[str, Any]], max_error_rate: float | None) -> list[str]:
    """One ``ERROR:`` line per reward whose calls failed above ``max_error_rate`` (``None``: the
    rewards whose every call failed)."""
    lines = []
    for name, r in report.items():
        rate = r["error_rate"]
        if (rate < 1.0) if max_error_rate is None else (rate <= max_error_rate):
            continue
        limit = ("every call failed" if max_error_rate is None
                 else f"above --max-error-rate {max_error_rate:g}")
        lines.append(
            f"ERROR: reward {name!r} failed on {r['errors'] + r['timeouts']} of {r['rows']} rows "
            f"({r['errors']} errors, {r['timeouts']} timeouts; {limit}); first: {r['first']['error']}"
        )
    return lines


def warnings_over(report: Mapping[str, Mapping[str, Any]], warn_rate: float,
                  max_error_rate: float | None) -> list[str]:
    """One ``WARNING:`` line per reward whose calls failed above ``warn_rate`` of its rows, unless
    :func:`over_the_limit` already gives it an ``ERROR:`` line."""
    lines = []
    for name, r in report.items():
        rate = r["error_rate"]
        if rate <= warn_rate or over_the_limit({name: r}, max_error_rate):
            continue
        lines.append(
            f"WARNING: reward {name!r} failed on {r['errors'] + r['timeouts']} of {r['rows']} rows "
            f"({rate:.0%}; {r['errors']} errors, {r['timeouts']} timeouts), above --warn-error-rate "
            f"{warn_rate:g}: those rows have no score from it; first: {r['first']['error']}"
        )
    return lines


def debug_lines(report: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Each failing reward's first error and where in its code it was raised (``--debug``)."""
    lines = []
    for name, r in report.items():
        first = r["first"]
        lines.append(f"DEBUG: reward {name!r}: {r['errors']} errors, {r['timeouts']} timeouts in "
                     f"{r['rows']} rows; first, on row {first['sample'] + 1}: {first['error']}")
        if first["traceback"]:
            lines.append("where the reward failed (most recent call last):")
            lines.extend(first["traceback"].splitlines())
    return lines


def drop_note(name: str, others: list[str]) -> str:
    """What ``on_failure: drop`` on term ``name`` beside the terms ``others`` does, plainly."""
    return (f"on_failure: drop on {name!r}: where it fails, a sample's score is the other rewards' "
            f"({', '.join(repr(o) for o in others)}) alone, so its failure reads as a lower score, not as "
            f"no reward; its row tells the two apart: errors.{name} says why and rewards.{name} is null "
            "(on_failure: nan gives such a sample no score; zero scores the failure 0.0)")


def drop_notes(columns: Mapping[str, Any], on_failure: Mapping[str, str]) -> list[str]:
    """One ``note:`` line per term with ``on_failure: drop`` that failed in this run beside other terms."""
    lines = []
    for name, col in columns.items():
        failed = col.failures()
        others = [n for n in columns if n != name]
        if failed and others and on_failure.get(name) == "drop":
            lines.append(f"note: reward {name!r} failed on {len(failed)} rows; {drop_note(name, others)}")
    return lines
