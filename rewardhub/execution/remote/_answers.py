"""What the client checks in a server's answer before it believes it.

An answer that is not JSON (a proxy's HTML page, a body cut short), lacks a field, or answers its rows
out of order (each row carries the ``index`` it was sent with) is a :class:`BadAnswer` naming the server
and what was wrong: never a bare Python error, never a score given to another sample. A row whose score
or reward is not a finite number (``1e400``, ``NaN``, text) is a failure of that row alone (its error
says what the server sent), never a number written out.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from ...errors import RewardhubError
from .._outcome import ERROR
from .._outcome import short

__all__ = ["BadAnswer", "checked_info", "checked_rows", "json_of"]

_FIX = "is it a `rewardhub serve` server, and of a version that speaks this client's protocol?"


class BadAnswer(RewardhubError):
    """A server's answer that the client cannot use; ``url`` is the server, ``what`` the request."""

    def __init__(self, url: str, what: str, problem: str) -> None:
        super().__init__(f"reward server {url} answered {what} with {problem}\n{_FIX}")
        self.url = url
        self.what = what
        self.problem = problem


def json_of(body: bytes, content_type: str, url: str, what: str) -> Any:
    """``body`` read as JSON.

    :raises BadAnswer: it is not UTF-8 JSON (its content type and its first characters are shown).
    """
    try:
        return json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        head = body[:80].decode("utf-8", "replace")
        kind = content_type.split(";")[0].strip() or "no content type"
        raise BadAnswer(url, what, f"{len(body)} bytes of {kind} that are not JSON ({exc}): {head!r}"
                        ) from None


def checked_info(data: Any, url: str) -> dict[str, Any]:
    """``GET /info``'s answer, with a ``terms`` list of objects that have a ``name``."""
    what = "GET /info"
    if not isinstance(data, Mapping):
        raise BadAnswer(url, what, f"a JSON {type(data).__name__}, not an object")
    terms = data.get("terms")
    if not isinstance(terms, list) or not all(isinstance(t, Mapping) and isinstance(t.get("name"), str)
                                              for t in terms):
        raise BadAnswer(url, what, "no 'terms' list of objects with a 'name'")
    limits = data.get("limits", {})
    if not isinstance(limits, Mapping) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in limits.values()
    ):
        raise BadAnswer(url, what, f"'limits' that are not positive integers: {limits!r}")
    return dict(data)


def checked_rows(data: Any, url: str, samples: Sequence[int]) -> list[dict[str, Any]]:
    """``POST /score``'s answer rows for ``samples`` (their numbers in the batch), sent with ``index``
    0 .. ``len(samples) - 1``: each row is an object with its ``index``, a ``score`` and ``rewards`` (numbers
    or null), and ``errors`` (term -> text), ``error_kinds`` (term -> kind) and ``extra`` objects where
    present.

    :raises BadAnswer: naming the first row (by its sample's number in the batch) that is wrong.
    """
    what = "POST /score"
    if not isinstance(data, Mapping) or not isinstance(data.get("rows"), list):
        raise BadAnswer(url, what, "no 'rows' list")
    rows, count = data["rows"], len(samples)
    if len(rows) != count:
        raise BadAnswer(url, what, f"{len(rows)} rows for {count} samples")
    for i, row in enumerate(rows):
        where = f"the row of sample {samples[i]}"
        if not isinstance(row, Mapping):
            raise BadAnswer(url, what, f"{where} a JSON {type(row).__name__}, not an object")
        if row.get("index") != i or isinstance(row.get("index"), bool):
            raise BadAnswer(url, what, f"{where} carrying index {row.get('index')!r}, not {i}: rows shifted "
                            "or out of order")
        if "score" not in row:
            raise BadAnswer(url, what, f"{where} without a 'score'")
        rewards = row.get("rewards")
        if not isinstance(rewards, Mapping):
            raise BadAnswer(url, what, f"{where} without a 'rewards' object")
        for key in ("errors", "error_kinds", "extra"):
            if row.get(key) is not None and not isinstance(row[key], Mapping):
                raise BadAnswer(url, what,
                                f"{where}: its {key!r} is a {type(row[key]).__name__}, not an object")
        for name, why in (row.get("errors") or {}).items():
            if not isinstance(why, str):
                raise BadAnswer(url, what, f"{where}: its error of {name!r} is {type(why).__name__} {why!r}, "
                                "not a text")
    return [_failed_where_not_finite(dict(r), url) for r in rows]


def _finite(value: Any) -> bool:
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)
                             and math.isfinite(value))


def _failed_where_not_finite(row: dict[str, Any], url: str) -> dict[str, Any]:
    """``row``, where a reward or the score the server sent is not a finite number (``1e400``, ``NaN``,
    text, ``true``), with that reward failed (an error, its value null) and the row's score null: the
    row has no reward, and says why; never a number written out."""
    rewards = dict(row["rewards"])
    bad = {n: v for n, v in rewards.items() if not _finite(v)}
    if not bad and _finite(row["score"]):
        return row
    errors, kinds = dict(row.get("errors") or {}), dict(row.get("error_kinds") or {})
    for name, value in bad.items():
        rewards[name] = None
        errors[name] = f"reward server {url} sent {short(value, 60)} as reward {name!r}: not a finite number"
        kinds[name] = ERROR
    if not _finite(row["score"]):
        for name in rewards:
            if name not in errors:
                errors[name] = (f"reward server {url} sent {short(row['score'], 60)} as this row's score: "
                                "not a finite number")
                kinds[name] = ERROR
    row.update(score=None, rewards=rewards, errors=errors, error_kinds=kinds)
    return row
