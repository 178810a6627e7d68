"""Secrets kept out of what rewardhub writes: a judge's API key, the ``rewardhub serve`` token.

A server or proxy may echo a request's ``Authorization`` header in its error text. Every text taken from
an answer goes through :func:`redact` before it is cut to an error's length (a key cut in two would
escape), so: each known secret is replaced, and so is any piece of one of :data:`MIN_PIECE` characters
or more (a proxy may have cut it), and any ``Bearer TOKEN``, whoever's token it is.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from collections.abc import Mapping

__all__ = ["bearer_secrets", "looks_like_key", "redact", "redact_bytes"]

#: the shortest piece of a secret taken for one (a proxy or a cut may leave only a piece; shorter pieces
#: would match ordinary text)
MIN_PIECE = 8
_BEARER = re.compile(r"(?i)(bearer\s+)(?!<)[^\s'\",;}\])\\]+")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def bearer_secrets(headers: Mapping[str, str]) -> list[str]:
    """The secrets a request's headers carry: an ``Authorization`` value and its token."""
    out = []
    for name, value in headers.items():
        if name.lower() in ("authorization", "proxy-authorization", "x-api-key", "api-key") and value:
            out.append(value)
            token = value.split(None, 1)[1] if " " in value.strip() else ""
            if token:
                out.append(token.strip())
    return out


def _known(secrets: Iterable[str]) -> set[str]:
    return {s for s in secrets if s and len(s) >= 4}


def _replaced(text: str, spans: list[tuple[int, int]], label: str) -> str:
    """``text`` with each of ``spans`` (overlapping ones as one) replaced by ``label``."""
    out, end = [], 0
    for left, right in sorted(spans):
        if left >= end:
            out += [text[end:left], label]
            end = right
        else:
            end = max(end, right)
    return "".join(out) + text[end:] if spans else text


def _spans(text: str, secret: str) -> list[tuple[int, int]]:
    """Where ``text`` holds ``secret`` or a piece of it of :data:`MIN_PIECE` characters or more."""
    size = min(MIN_PIECE, len(secret))
    spans = []
    for j in range(len(secret) - size + 1):
        piece = secret[j:j + size]
        at = text.find(piece)
        while at >= 0:
            left, right, a, b = at, at + size, j, j + size
            while left > 0 and a > 0 and text[left - 1] == secret[a - 1]:
                left, a = left - 1, a - 1
            while right < len(text) and b < len(secret) and text[right] == secret[b]:
                right, b = right + 1, b + 1
            spans.append((left, right))
            at = text.find(piece, at + 1)
    return spans


def redact(text: str, secrets: Iterable[str], label: str = "<redacted>") -> str:
    """``text`` without any of ``secrets`` (see the module's docstring), each replaced by ``label``."""
    text = _replaced(text, [sp for s in _known(secrets) for sp in _spans(text, s)], label)
    return _BEARER.sub(lambda m: m.group(1) + label, text)


def redact_bytes(data: bytes, secrets: Iterable[str], label: str = "<redacted>") -> bytes:
    """:func:`redact`'s pieces of ``secrets`` out of bytes (an answer's body), wherever they are."""
    text = data.decode("latin-1")  # one character a byte: every byte sequence, and back unchanged
    spans = [sp for s in _known(secrets) for sp in _spans(text, s.encode("utf-8").decode("latin-1"))]
    return _replaced(text, spans, label).encode("latin-1", errors="replace") if spans else data


def looks_like_key(value: str) -> bool:
    """``value`` looks like a key itself, not the name of an environment variable holding one: it is no
    valid name, or it is long and holds lowercase letters and digits (names are mostly upper case)."""
    if not _NAME.fullmatch(value):
        return True
    return len(value) >= 20 and any(c.islower() for c in value) and any(c.isdigit() for c in value)
