"""Request bodies, read as strict JSON.

:func:`strict_json` reads a body as JSON and nothing else: Python's ``json`` takes ``NaN``,
``Infinity`` and ``-Infinity`` (not JSON) and reads ``1e400`` as an infinite float, keeps the last
value of a key given twice, and fails a body nested past the recursion limit or holding an integer
of more than 4,300 digits with a ``RecursionError`` or a ``ValueError`` from deep inside. Each is
refused here with a :class:`~rewardhub.errors.UsageError` naming it (the handler answers 400), as
``rewardhub score`` refuses a data file's duplicated key.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any

from ..errors import UsageError

__all__ = ["strict_json"]

#: digits an integer may have (CPython's own limit for turning text into an int)
MAX_DIGITS = getattr(sys, "get_int_max_str_digits", lambda: 4300)() or 4300


class _NotJson(ValueError):
    """A token or an object that JSON does not allow (the message says which)."""


def _constant(token: str) -> Any:
    raise _NotJson(f"{token} is not a JSON number (JSON has no NaN or infinity); send a finite number, "
                   "or null")


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotJson(f"the number {text[:40]} is beyond the range of a float; send a finite number")
    return value


def _int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_DIGITS:
        raise _NotJson(f"an integer of {digits} digits is longer than the {MAX_DIGITS} digits a number may "
                       "have; send it as a string")
    return int(text)


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        key = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise _NotJson(f"the key {key!r} appears twice in one object; a row can hold only one of its "
                       "values: rename one of them")
    return obj


#: one decoder for every body (``json.loads`` with hooks would build one per call)
_DECODER = json.JSONDecoder(object_pairs_hook=_object, parse_constant=_constant, parse_float=_float,
                            parse_int=_int)


def strict_json(raw: bytes) -> Any:
    """``raw`` as JSON, refusing what JSON does not allow (see the module's doc).

    :raises UsageError: the reason, for a 400.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError("the request body is not UTF-8 text") from None
    try:
        return _DECODER.decode(text)
    except _NotJson as exc:
        raise UsageError(f"the request body is not JSON: {exc}") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"the request body is not JSON: {exc}") from None
    except RecursionError:
        raise UsageError(
            f"the request body is nested too deeply (more than about {sys.getrecursionlimit()} levels of "
            "arrays and objects); flatten it"
        ) from None

