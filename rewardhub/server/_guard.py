"""Who may talk to the server: the bearer token, and the checks that keep web pages out.

A web page the user opens may post to ``http://127.0.0.1:PORT``: a "simple" cross-origin request
(``text/plain``, a form) goes out with no preflight, and DNS rebinding points the page's own name at
127.0.0.1 so that even its reads are same-origin. So every request is checked, before any handler:

- bound to a loopback address, the ``Host`` header must name this machine (``localhost``,
  ``127.x.y.z``, ``[::1]``), which a rebound page cannot send;
- an ``Origin`` header (browsers send it; HTTP clients do not) must be the server's own;
- a ``POST`` body must come as ``Content-Type: application/json``, which no page can send
  cross-origin without a preflight, which the server never grants;
- with a token, ``Authorization: Bearer TOKEN`` on every route but ``/health``; a header that is not
  text (bytes that are not UTF-8) is a wrong token, never an error.
"""

from __future__ import annotations

import functools
import hmac
import ipaddress
import socket
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError

__all__ = ["Refusal", "check_token", "is_loopback", "refusal"]


@dataclass(frozen=True)
class Refusal:
    status: int
    error: str
    headers: dict[str, str]


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address, without port) is this machine's loopback, or its own
    host name (which a rebound page cannot send: its Host is the page's name)."""
    host = host.strip().rstrip(".").lower()
    if host in ("localhost", _own_name()) or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@functools.cache
def _own_name() -> str:
    return socket.gethostname().lower()


def check_token(token: str, env: str) -> str:
    """``token`` when a client can send it in an ``Authorization`` header and match it.

    :raises UsageError: it has space at either end (HTTP strips it from a header, so no client could
        send it), or a character that is not printable ASCII (clients encode headers in Latin-1 or
        refuse them).
    """
    if token != token.strip():
        raise UsageError(f"${env} starts or ends with white space, which HTTP strips from a header: "
                         "no client could send it\nset the token without the spaces")
    bad = sorted({c for c in token if not (" " <= c <= "~")})
    if bad:
        shown = ", ".join(repr(c) for c in bad[:5])
        raise UsageError(f"${env} holds {shown}, not printable ASCII: no client could send it in an "
                         "HTTP header\nuse letters, digits and punctuation (e.g. `openssl rand -hex 32`)")
    return token


def refusal(request: Any, *, token: str | None, loopback: bool, open_paths: frozenset[str]) -> Refusal | None:
    """Why ``request`` is refused, or None when it may go on to its handler.

    :param loopback: the server listens on a loopback address (the ``Host`` check applies).
    :param open_paths: the paths that need no token (``/health``).
    """
    headers = request.headers
    host = headers.get("Host")
    if loopback and host is not None and not is_loopback(_host_name(host)):
        return Refusal(403, f"the Host header {host!r} does not name this machine: a server listening "
                            "on loopback answers only localhost, 127.0.0.1 or [::1] (a web page that rebinds "
                            "its own name to 127.0.0.1 sends its name); call http://127.0.0.1:PORT, or "
                            "listen on another --host with a token", {})
    origin = headers.get("Origin")
    if origin is not None and (host is None or origin.rstrip("/").lower() != f"{request.scheme}://{host}".lower()):
        return Refusal(403, f"cross-origin request refused (Origin: {origin!r}): this server answers HTTP "
                            "clients, not web pages", {})
    if token is not None and request.path not in open_paths and not _authorized(headers, token):
        return Refusal(401, "missing or wrong bearer token (Authorization: Bearer ...)",
                       {"WWW-Authenticate": "Bearer"})
    if request.method == "POST" and not _is_json(request.content_type):
        sent = headers.get("Content-Type")
        return Refusal(415, "a POST body must be JSON, sent with 'Content-Type: application/json' "
                            f"({'got ' + repr(sent) if sent else 'no Content-Type was sent'})", {})
    return None


def _host_name(host: str) -> str:
    if host.startswith("["):  # [::1]:8000
        return host[1:].split("]", 1)[0]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _is_json(content_type: str) -> bool:
    ct = content_type.lower()
    return ct == "application/json" or (ct.startswith("application/") and ct.endswith("+json"))


def _authorized(headers: Any, token: str) -> bool:
    given = headers.get("Authorization", "")
    scheme, _, value = given.partition(" ")
    # a header's bytes that are not UTF-8 arrive as surrogates: encode them back, never raise on them
    sent = value.strip().encode("utf-8", "surrogateescape")
    return scheme.lower() == "bearer" and hmac.compare_digest(sent, token.encode())
