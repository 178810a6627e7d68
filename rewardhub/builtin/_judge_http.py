"""The HTTP side of ``llm_judge``: per-minute limits, one client session per event loop, and a POST to an
OpenAI-compatible ``/chat/completions`` retried with back-off on 429, 5xx and transport errors.

aiohttp is imported when a judge first calls out (``pip install rewardhub[serve]`` provides it), so that
``import rewardhub`` stays light.
"""

from __future__ import annotations

import json
import urllib.parse
import weakref
from collections.abc import AsyncIterator
from collections.abc import Mapping
from typing import TYPE_CHECKING
from typing import Any

from .._ratelimit import Limiter
from .._ratelimit import limiter
from ..errors import RewardhubError
from ..errors import UsageError

if TYPE_CHECKING:
    import asyncio

__all__ = ["JudgeError", "Limiter", "chat_url", "limiter", "post_json"]


class JudgeError(RewardhubError):
    """The judge's endpoint failed, or its reply holds no usable score."""

    __module__ = "rewardhub"


def chat_url(base_url: str) -> str:
    """``base_url`` + ``/chat/completions`` (a URL that already ends so is kept as it is)."""
    parts = urllib.parse.urlsplit(str(base_url))
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UsageError(f"llm_judge base_url={base_url!r} is not an http(s) URL\n"
                         "set it to an OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1")
    url = str(base_url).rstrip("/")
    return url if url.endswith("/chat/completions") else url + "/chat/completions"


#: one client session per event loop (the runner runs each batch of async calls on a fresh loop)
_SESSIONS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[Any, AsyncIterator[None]]] = (
    weakref.WeakKeyDictionary())


async def _closing(session: Any) -> AsyncIterator[None]:
    """Held open while its loop runs: ``asyncio.run`` closes a loop's async generators when it ends,
    and this one closes the session then."""
    try:
        yield
    finally:
        await session.close()


async def _session() -> Any:
    import asyncio

    import aiohttp

    loop = asyncio.get_running_loop()
    held = _SESSIONS.get(loop)
    if held is None:
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        closer = _closing(session)
        await anext(closer)  # runs to its yield at once (no other task can come between)
        held = _SESSIONS[loop] = (session, closer)
    return held[0]


async def post_json(url: str, body: Mapping[str, Any], headers: Mapping[str, str], *, retries: int,
                    backoff_s: float, request_timeout_s: float) -> Any:
    """POST ``body``; the decoded JSON reply of the first answer that is not a 429 or 5xx.

    :raises JudgeError: after ``retries + 1`` failed tries, on another HTTP error, or a reply that is
        not JSON. The message names the URL and status, never the request's headers (the API key).
    """
    import asyncio

    import aiohttp

    session = await _session()
    timeout = aiohttp.ClientTimeout(total=request_timeout_s)
    last, refused = "", False
    for attempt in range(retries + 1):
        wait = min(30.0, backoff_s * 2 ** attempt)
        try:
            async with session.post(url, json=body, headers=dict(headers), timeout=timeout) as resp:
                status, text = resp.status, await resp.text(errors="replace")
                after = resp.headers.get("Retry-After", "")
        except (aiohttp.ClientError, TimeoutError) as exc:
            last = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            # nothing answers at that address (a certificate it refuses is another matter)
            refused = isinstance(exc, aiohttp.ClientConnectorError) and \
                not isinstance(exc, aiohttp.ClientSSLError)
        else:
            refused = False
            if status == 429 or status >= 500:
                last = f"HTTP {status}"
                wait = max(wait, min(30.0, float(after))) if after.replace(".", "", 1).isdigit() else wait
            elif status != 200:
                raise JudgeError(f"the judge at {url} answered HTTP {status}: {text[:300]!r}\n"
                                 "check base_url, model and api_key_env")
            else:
                try:
                    return json.loads(text)
                except json.JSONDecodeError:
                    raise JudgeError(f"the judge at {url} answered with text that is not JSON: "
                                     f"{text[:200]!r}") from None
        if attempt < retries:
            await asyncio.sleep(wait)
    if refused:
        base = url.removesuffix("/chat/completions")
        raise JudgeError(f"the judge at {url} cannot be reached ({retries + 1} tries; the last: {last})\n"
                         f"is the server running at {base}? start it, or set kwargs.base_url to where it is")
    raise JudgeError(f"the judge at {url} failed {retries + 1} times; the last: {last}\n"
                     "raise kwargs.retries or lower the request rate (max_rpm, max_concurrency)")
