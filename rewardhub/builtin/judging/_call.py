"""One judging request with everything the judging modes need from it: the reply's text, its token count
and ``top_logprobs``, a bound on requests in flight per endpoint, a failure's kind, and a cache of
verdicts so no pair or criterion is asked twice in a process.

It reuses ``llm_judge``'s HTTP side (:mod:`rewardhub.builtin.model_http`: the session, retries and the
per-minute limits) and its prompt pieces (the system prompt, the marked blocks).
"""

from __future__ import annotations

import functools
import json
import threading
import weakref
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import TYPE_CHECKING
from typing import Any

from ..judge import SYSTEM
from ..judge import auth_headers
from ..model_http import JudgeError
from ..model_http import chat_reply
from ..model_http import chat_url

if TYPE_CHECKING:
    import asyncio

__all__ = ["Endpoint", "JudgeFailure", "Reply", "Tally", "ask", "failure_kind"]

#: verdicts kept per process (the least recently used go first)
CACHE_ENTRIES = 65536
_CACHE: OrderedDict[str, Reply] = OrderedDict()
_CACHE_LOCK = threading.Lock()
#: (event loop, url, limit) -> the semaphore bounding that endpoint's requests in flight on that loop
_GATES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[str, int], asyncio.Semaphore]] = (
    weakref.WeakKeyDictionary())
#: reply text that reads as a refusal to judge (a reply with no verdict and these words)
_REFUSALS = ("i can't", "i cannot", "i won't", "i'm sorry", "i am sorry", "unable to")


class JudgeFailure(JudgeError):
    """A judging call that gave no verdict; ``kind``: unreachable, timeout, http, bad_reply, no_verdict,
    refusal."""

    __module__ = "rewardhub"

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"judge call failed ({kind}): {message}")
        self.kind = kind


def failure_kind(message: str) -> str:
    """The kind of a :class:`JudgeError` from the HTTP layer, read from its message."""
    if "TimeoutError" in message or "timed out" in message:
        return "timeout"
    if "failed" in message and "times; the last" in message:
        return "unreachable"
    if "answered HTTP" in message:
        return "http"
    return "bad_reply"


@dataclass
class Reply:
    text: str
    tokens: int = 0
    #: the first generated token's ``top_logprobs`` (token -> logprob), where the endpoint gave them
    top: dict[str, float] = field(default_factory=dict)
    cached: bool = False
    #: its key in the verdict cache (``None``: not to be kept)
    key: str | None = None


@dataclass
class Tally:
    """One reward call's judge cost: calls made (cache hits are no calls), tokens, failed calls."""

    calls: int = 0
    tokens: int = 0
    failed: int = 0
    kinds: dict[str, int] = field(default_factory=dict)

    def extra(self) -> dict[str, Any]:
        out: dict[str, Any] = {"judge_calls": self.calls, "judge_tokens": self.tokens,
                               "judge_failed": self.failed}
        if self.kinds:
            out["judge_failures"] = dict(self.kinds)
        return out


@dataclass(frozen=True)
class Endpoint:
    """Where and how to ask: the judge kwargs every mode shares."""

    base_url: str
    model: str
    api_key_env: str | None = None
    max_tokens: int = 64
    temperature: float = 0.0
    max_rpm: float | None = None
    max_tpm: float | None = None
    retries: int = 4
    backoff_s: float = 0.5
    request_timeout_s: float = 60.0
    #: requests in flight to this endpoint from this process and event loop, all terms together
    max_in_flight: int = 32
    logprobs: int = 0
    #: requests in flight to this endpoint from this process, or inside Ray from the whole cluster
    #: (:mod:`rewardhub._concurrency`); None: no such limit
    max_concurrency: int | None = None

    @classmethod
    def of(cls, kwargs: Mapping[str, Any], **defaults: Any) -> Endpoint:
        names = cls.__dataclass_fields__
        return cls(**{**defaults, **{k: v for k, v in kwargs.items() if k in names and v is not None}})


@functools.lru_cache(maxsize=64)
def _url(base_url: str) -> str:
    return chat_url(base_url)


def _gate(url: str, limit: int) -> asyncio.Semaphore:
    import asyncio

    loop = asyncio.get_running_loop()
    gates = _GATES.setdefault(loop, {})
    key = (url, max(1, int(limit)))
    if key not in gates:
        gates[key] = asyncio.Semaphore(key[1])
    return gates[key]


def _top_logprobs(reply: Any) -> dict[str, float]:
    """The ``top_logprobs`` of the first generated token that is a number (the score's), else of the
    first token; empty where the endpoint gave none."""
    try:
        tokens = reply["choices"][0]["logprobs"]["content"]
        pick = next((t for t in tokens if _is_number(str(t.get("token", "")))), tokens[0])
        return {str(t["token"]): float(t["logprob"]) for t in pick.get("top_logprobs") or ()}
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, StopIteration):
        return {}


def _is_number(token: str) -> bool:
    try:
        float(token.strip())
    except ValueError:
        return False
    return bool(token.strip())


def _key(user: str, ep: Endpoint, cache_key: Any) -> str:
    blob = json.dumps([ep.base_url, ep.model, ep.temperature, ep.max_tokens, ep.logprobs, user, cache_key],
                      sort_keys=True, default=str)
    import hashlib  # here: its import costs `rewardhub list` ~3 ms

    return hashlib.sha256(blob.encode()).hexdigest()


async def ask(user: str, ep: Endpoint, tally: Tally, *, cache_key: Any = None) -> Reply:
    """One judging request (or its cached reply when ``cache_key`` was asked before and not failed).

    :raises JudgeFailure: the call gave no reply; it is counted in ``tally`` with its kind.
    """
    key = None
    if cache_key is not None:
        key = _key(user, ep, cache_key)
        with _CACHE_LOCK:
            hit = _CACHE.get(key)
            if hit is not None:
                _CACHE.move_to_end(key)
                return Reply(hit.text, 0, hit.top, cached=True)
    url = _url(ep.base_url)
    headers = auth_headers(ep.api_key_env)
    secret = headers.get("Authorization", "")[7:]
    tally.calls += 1
    try:
        text, reply = await chat_reply(
            url, headers, system=SYSTEM, user=user, model=ep.model, max_tokens=ep.max_tokens,
            temperature=ep.temperature, max_rpm=ep.max_rpm, max_tpm=ep.max_tpm,
            max_concurrency=ep.max_concurrency, gate=_gate(url, ep.max_in_flight),
            extra={"logprobs": True, "top_logprobs": int(ep.logprobs)} if ep.logprobs else None,
            no_text_kind="bad_reply", retries=ep.retries, backoff_s=ep.backoff_s,
            request_timeout_s=ep.request_timeout_s)
    except JudgeError as exc:
        kind = exc.kind if exc.kind != "error" else failure_kind(str(exc))
        message = str(exc).replace(secret, "<api key>") if secret else str(exc)
        raise fail(tally, JudgeFailure(kind, message)) from None
    if secret:
        text = text.replace(secret, "<api key>")
    usage = reply.get("usage") if isinstance(reply, Mapping) else None
    tokens = int(usage.get("total_tokens") or 0) if isinstance(usage, Mapping) else 0
    tally.tokens += tokens
    return Reply(text, tokens, _top_logprobs(reply) if ep.logprobs else {}, key=key)


def remember(reply: Reply) -> None:
    """Keep ``reply`` (one that gave a verdict) for the next ask of the same request."""
    if reply.key is None or reply.cached:
        return
    with _CACHE_LOCK:
        _CACHE[reply.key] = reply
        if len(_CACHE) > CACHE_ENTRIES:
            _CACHE.popitem(last=False)


def no_verdict(text: str, what: str) -> JudgeFailure:
    """The failure of a reply that holds no verdict: a refusal when it reads as one."""
    low = text.lower()
    kind = "refusal" if any(w in low for w in _REFUSALS) else "no_verdict"
    return JudgeFailure(kind, f"the judge's reply has no {what}: {text[:200]!r}")


def fail(tally: Tally, exc: JudgeFailure) -> JudgeFailure:
    """Count a failure (a call that gave no reply, or a reply that held no verdict) in ``tally``."""
    tally.failed += 1
    tally.kinds[exc.kind] = tally.kinds.get(exc.kind, 0) + 1
    return exc
