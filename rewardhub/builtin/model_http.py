"""The HTTP side of ``llm_judge`` and of the graders that call a model (``score_model``, ``label_model``,
``cosine``): per-minute limits, one client session per event loop, and a POST to an OpenAI-compatible
endpoint retried with back-off on 429, 5xx and transport errors.

aiohttp is imported when a judge first calls out (``pip install rewardhub[serve]`` provides it), so that
``import rewardhub`` stays light.
"""

from __future__ import annotations

import contextlib
import json
import urllib.parse
import weakref
from collections.abc import AsyncIterator
from collections.abc import Mapping
from typing import TYPE_CHECKING
from typing import Any

from .._backoff import backoff_wait
from .._backoff import retry_after_s
from .._ratelimit import Limiter
from .._ratelimit import limiter
from .._secrets import bearer_secrets
from .._secrets import redact
from ..errors import RewardhubError
from ..errors import UsageError

if TYPE_CHECKING:
    import asyncio

__all__ = ["KEY_LABEL", "REPLY_TOO_LARGE", "JudgeError", "Limiter", "chat_reply", "chat_url", "limiter",
           "post_json"]

#: what stands for the judge's API key in any text rewardhub keeps
KEY_LABEL = "<api key>"

#: the longest wait between two tries of one judge request (the schedule: :mod:`rewardhub._backoff`)
MAX_BACKOFF_S = 30.0


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


#: the ``kind`` of the error of a reply over its bound
REPLY_TOO_LARGE = "reply_too_large"


async def _bounded(resp: Any, url: str, max_bytes: int | None) -> str:
    """An answer's body as text, read no further than ``max_bytes``.

    :raises JudgeError: (kind :data:`REPLY_TOO_LARGE`) the answer announces or sends more.
    """
    if max_bytes is None:
        return str(await resp.text(errors="replace"))

    def too_large(size: str) -> JudgeError:
        return JudgeError(f"the judge at {url} sent a reply of {size} bytes, over "
                          f"max_reply_bytes={max_bytes}; it was not read on\n"
                          "lower the judge's max_tokens, or raise kwargs.max_reply_bytes",
                          kind=REPLY_TOO_LARGE)

    if resp.content_length is not None and resp.content_length > max_bytes:
        raise too_large(str(resp.content_length))
    chunks, size = [], 0
    while size <= max_bytes:
        chunk = await resp.content.read(max_bytes + 1 - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    if size > max_bytes:
        raise too_large("more than " + str(max_bytes))
    return b"".join(chunks).decode(resp.charset or "utf-8", errors="replace")


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
                    backoff_s: float, request_timeout_s: float, max_bytes: int | None = None,
                    max_rpm: float | None = None) -> Any:
    """POST ``body``; the decoded JSON reply of the first answer that is not a 429 or 5xx. Past
    ``max_bytes`` an answer is not read on (:func:`_bounded`). With ``max_rpm``, each try after the first
    waits for its turn under the endpoint's limit too (the caller took the first one's): a request sent
    again is a request.

    :raises JudgeError: after ``retries + 1`` failed tries, on another HTTP error, or a reply that is
        not JSON. The message names the URL and status, never the request's headers: the API key is
        taken out of any text from the answer before it is cut (:func:`~rewardhub._secrets.redact`).
    """
    import asyncio

    import aiohttp

    secrets = bearer_secrets(headers)

    def clean(text: str) -> str:
        return redact(text, secrets, KEY_LABEL)

    session = await _session()
    timeout = aiohttp.ClientTimeout(total=request_timeout_s)
    last, refused = "", False
    for attempt in range(retries + 1):
        wait = backoff_wait(attempt, backoff_s, MAX_BACKOFF_S)
        try:
            async with session.post(url, json=body, headers=dict(headers), timeout=timeout) as resp:
                status, text = resp.status, await _bounded(resp, url, max_bytes)
                after = resp.headers.get("Retry-After", "")
        except (aiohttp.ClientError, TimeoutError) as exc:
            last = clean(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
            # nothing answers at that address (a certificate it refuses is another matter)
            refused = isinstance(exc, aiohttp.ClientConnectorError) and \
                not isinstance(exc, aiohttp.ClientSSLError)
        else:
            refused = False
            if status == 429 or status >= 500:
                last = f"HTTP {status}"
                wait = backoff_wait(attempt, backoff_s, MAX_BACKOFF_S, retry_after_s(after))
            elif status != 200:
                raise JudgeError(f"the judge at {url} answered HTTP {status}: {clean(text)[:300]!r}\n"
                                 "check base_url, model and api_key_env")
            else:
                try:
                    return json.loads(text)
                except json.JSONDecodeError:
                    raise JudgeError(f"the judge at {url} answered with text that is not JSON: "
                                     f"{clean(text)[:200]!r}") from None
        if attempt < retries:
            if max_rpm:
                from .._ratelimit import limiter

                wait = max(wait, limiter(url, "requests", max_rpm).reserve(1))
            await asyncio.sleep(wait)
    if refused:
        base = url.removesuffix("/chat/completions")
        raise JudgeError(f"the judge at {url} cannot be reached ({retries + 1} tries; the last: {last})\n"
                         f"is the server running at {base}? start it, or set kwargs.base_url to where it is")
    raise JudgeError(f"the judge at {url} failed {retries + 1} times; the last: {last}\n"
                     "raise kwargs.retries or lower the request rate (max_rpm, max_concurrency)")


async def chat_reply(url: str, headers: Mapping[str, str], *, system: str, user: str, model: str,
                     max_tokens: int, temperature: float, max_rpm: float | None = None,
                     max_tpm: float | None = None, max_concurrency: int | None = None, gate: Any = None,
                     extra: Mapping[str, Any] | None = None, no_text_kind: str | None = None,
                     **post: Any) -> tuple[str, Any]:
    """One chat request (``extra``: more of its body) after its turn under the per-minute limits, within
    the endpoint's ``max_concurrency`` and ``gate`` (an async context); the reply's text, and the reply.
    ``post``: :func:`post_json`'s settings.

    :raises JudgeError: the request failed, or the reply has no text (its kind ``no_text_kind``).
    """
    import asyncio

    body = {"model": model, "max_tokens": max_tokens, "temperature": temperature,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            **(extra or {})}
    wait = limiter(url, "requests", max_rpm).reserve(1) if max_rpm else 0.0
    if max_tpm:  # an estimate made before the call: 4 characters a token, plus the longest reply
        wait = max(wait, limiter(url, "tokens", max_tpm).reserve((len(system) + len(user)) / 4 + max_tokens))
    if wait:
        await asyncio.sleep(wait)
    from .._concurrency import slot

    async with gate or contextlib.nullcontext():
        async with slot(url, max_concurrency) if max_concurrency else contextlib.nullcontext():
            reply = await post_json(url, body, headers, max_rpm=max_rpm, **post)
    try:
        text = reply["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        text = None
    if not isinstance(text, str):
        shown = redact(json.dumps(reply), bearer_secrets(headers), KEY_LABEL)
        raise JudgeError(f"the judge at {url} replied without choices[0].message.content: {shown[:200]}",
                         kind=no_text_kind)
    return text, reply
