"""Secrets kept out of what rewardhub writes: a judge's API key, the ``rewardhub serve`` token.

A server or proxy may echo a request's ``Authorization`` header in its error text. Every text taken from
an answer goes through :func:`redact` before it is cut to an error's length (a key cut in two would
escape), so: each known secret is replaced whole, a piece of one that a cut left at the text's end or
start is replaced too, and any ``Bearer TOKEN`` is replaced, whoever's token it is.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from collections.abc import Mapping

__all__ = ["bearer_secrets", "looks_like_key", "redact", "redact_bytes"]

#: the shortest piece of a secret taken for one at a text's edge (shorter ones match too much)
MIN_PIECE = 6
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


def redact(text: str, secrets: Iterable[str], label: str = "<redacted>") -> str:
    """``text`` without any of ``secrets`` (see the module's docstring), each replaced by ``label``."""
    for secret in sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True):
        text = text.replace(secret, label)
        if len(secret) > MIN_PIECE:
            for k in range(len(secret) - 1, MIN_PIECE - 1, -1):  # a head cut off at the end
                if text.endswith(secret[:k]):
                    text = text[:-k] + label
                    break
            for k in range(len(secret) - 1, MIN_PIECE - 1, -1):  # a tail left at the start
                if text.startswith(secret[-k:]):
                    text = label + text[k:]
                    break
    return _BEARER.sub(lambda m: m.group(1) + label, text)


def redact_bytes(data: bytes, secrets: Iterable[str], label: str = "<redacted>") -> bytes:
    """:func:`redact` of bytes (an answer's body), every secret replaced wherever it is."""
    for secret in sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True):
        data = data.replace(secret.encode("utf-8"), label.encode("utf-8"))
    return data


def looks_like_key(value: str) -> bool:
    """``value`` looks like a key itself, not the name of an environment variable holding one: it is no
    valid name, or it is long and holds lowercase letters and digits (names are mostly upper case)."""
    if not _NAME.fullmatch(value):
        return True
    return len(value) >= 20 and any(c.islower() for c in value) and any(c.isdigit() for c in value)
