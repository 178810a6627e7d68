"""Request bodies: read as strict JSON, and bounded in the bytes held at once.

:func:`strict_json` reads a body as JSON and nothing else: Python's ``json`` takes ``NaN``,
``Infinity`` and ``-Infinity`` (not JSON) and reads ``1e400`` as an infinite float, keeps the last
value of a key given twice, and fails a body nested past the recursion limit or holding an integer
of more than 4,300 digits with a ``RecursionError`` or a ``ValueError`` from deep inside. Each is
refused here with a :class:`~rewardhub.errors.UsageError` naming it (the handler answers 400), as
``rewardhub score`` refuses a data file's duplicated key.

:class:`WaitingBytes` bounds the bytes of the request bodies a server holds at once (read, parsed,
waiting for a call slot or being scored), by their ``Content-Length`` and before a byte of them is
read: past ``limit`` a request is answered 503 with ``Retry-After`` (the remote client retries it),
so that many large requests to a busy server wait in their clients, not in the server's memory.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
from collections.abc import Iterator
from typing import Any

from .._datafiles import DuplicateKey
from .._datafiles import unique_keys
from ..errors import RewardhubError
from ..errors import UsageError

__all__ = ["Busy", "WaitingBytes", "strict_json"]

#: digits an integer may have (CPython's own limit for turning text into an int)
MAX_DIGITS = getattr(sys, "get_int_max_str_digits", lambda: 4300)() or 4300


class _NotJson(ValueError):
    """A token that JSON does not allow (the message says which)."""


def _constant(token: str) -> Any:
    raise _NotJson(f"{token} is not a JSON number (JSON has no NaN or infinity); send a finite number, "
                   "or null")


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotJson(f"the number {text[:40]} is beyond the range of a float; send a finite number")
    return value


#: one decoder for every body (``json.loads`` with hooks would build one per call)
_DECODER = json.JSONDecoder(object_pairs_hook=unique_keys, parse_constant=_constant, parse_float=_float)


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
    except DuplicateKey as exc:
        raise UsageError(f"the request body is refused: the key {exc.args[0]!r} appears twice in one object; "
                         "a row can hold only one of its values: rename one of them") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"the request body is not JSON: {exc}") from None
    except ValueError as exc:  # int()'s own limit, met inside the decoder
        if "digits" not in str(exc):
            raise
        raise UsageError(f"the request body is refused: it holds an integer longer than the {MAX_DIGITS} "
                         "digits a number may have; send it as a string") from None
    except RecursionError:
        raise UsageError(
            f"the request body is nested too deeply (more than about {sys.getrecursionlimit()} levels of "
            "arrays and objects); flatten it"
        ) from None


class WaitingBytes:
    """The bytes of the request bodies held now, and their limit (``rewardhub serve --max-waiting-mb``).

    A request is let in while the bodies held leave room for it, and always when none is held (so a
    body up to ``--max-body-mb`` is served even where that is above this limit).
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        #: requests answered 503 because the limit was reached
        self.refused = 0

    @contextlib.contextmanager
    def holding(self, length: int | None, max_body: int) -> Iterator[None]:
        """Hold a body of ``length`` bytes (unknown: ``max_body``) while the block runs.

        :raises Busy: it does not fit (nothing held).
        """
        size = min(length if length is not None else max_body, max_body)
        if self.held and self.held + size > self.limit:
            self.refused += 1
            raise Busy(f"this server holds {self.held} bytes of request bodies, and this one's {size} would "
                       f"pass its limit of {self.limit} (--max-waiting-mb): send it again shortly "
                       "(Retry-After), or start the server with a larger --max-waiting-mb")
        self.held += size
        try:
            yield
        finally:
            self.held -= size


class Busy(RewardhubError):
    """A body does not fit within ``--max-waiting-mb`` (answered 503 with ``Retry-After``)."""
