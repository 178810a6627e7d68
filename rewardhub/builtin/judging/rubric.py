"""``llm_judge_rubric``: weighted criteria, a few per call; ``llm_judge_sampled``: one score asked
``samples`` times (self-consistency), read from the reply's text or from its ``top_logprobs``.

A rubric's reward is the weighted share of criteria met, in [0, 1]. The criteria go ``max_criteria`` to a
call, and the calls of one sample run together (bounded by ``max_in_flight`` per endpoint). Each
criterion's verdict and reason go into the row's ``extra`` (``criteria``), and its pass rate into the
metrics (``rewards/<term>/criterion/<name>``). A call that fails, or a reply that misses a criterion,
fails the sample with the failure's kind: never a criterion counted as unmet.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from ...decorator import reward
from ...errors import UsageError
from .._verdict import num
from .._verdict import verdict
from ..judge import DEFAULT_TEMPLATE
from ..judge import EXPENSIVE
from ..judge import block
from ..judge import fill
from ..judge import prompt_text
from ..judge import reference_block
from ..judge import render_messages
from ..judge import text_of
from ..judge import valid_range
from ..model_http import JudgeError
from ._call import Endpoint
from ._call import JudgeFailure
from ._call import Tally
from ._call import ask
from ._call import fail
from ._call import no_verdict
from ._call import remember
from .vote import check_voting
from .vote import vote

__all__ = ["DEFAULT_RUBRIC_TEMPLATE", "llm_judge_rubric", "llm_judge_sampled"]

DEFAULT_RUBRIC_TEMPLATE = (
    "Judge the RESPONSE to the PROMPT against each numbered CRITERION (the REFERENCE answer, when given, "
    "is correct).\n\nPROMPT:\n{prompt}\n\nREFERENCE:\n{ground_truth}\n\nRESPONSE:\n{response}\n\n"
    "CRITERIA:\n{criteria}\n\nReply with one line per criterion: `Criterion K: YES - reason` when the "
    "response meets it, else `Criterion K: NO - reason`.")

_LOGPROB_TEMPLATE = (
    "Grade the RESPONSE to the PROMPT, comparing it with the REFERENCE answer when one is given.\n\n"
    "PROMPT:\n{prompt}\n\nREFERENCE:\n{ground_truth}\n\nRESPONSE:\n{response}\n\n"
    "Reply with the score alone: one whole number from {low} (wrong) to {high} (fully correct).")


def _criteria(raw: Any) -> list[tuple[str, str, float]]:
    """(name, text, weight) of each criterion: a string, or a mapping with ``text`` and ``weight``."""
    if not isinstance(raw, (list, tuple)) or not raw:
        raise UsageError("llm_judge_rubric criteria: give a list of criteria, each a string or "
                         "{text: ..., weight: ..., name: ...}")
    out = []
    for k, c in enumerate(raw, 1):
        c = {"text": c} if isinstance(c, str) else c
        if not isinstance(c, Mapping) or not str(c.get("text", "")).strip():
            raise UsageError(f"llm_judge_rubric criteria[{k - 1}] = {c!r} has no text\n"
                             "write it as a string or {text: ..., weight: ...}")
        weight = float(c.get("weight", 1.0))
        if not math.isfinite(weight) or weight < 0:
            raise UsageError(f"llm_judge_rubric criteria[{k - 1}] weight {weight!r}: give a number >= 0")
        out.append((str(c.get("name") or f"c{k}"), str(c["text"]), weight))
    if not sum(w for _, _, w in out) > 0:
        raise UsageError("llm_judge_rubric criteria: the weights add up to 0; give one a weight > 0")
    return out


def _sample_text(prompt: Any, response: Any, messages: Sequence[Any] | None) -> tuple[str, str]:
    graded = render_messages(messages) if messages and not text_of(response) else text_of(response)
    return block("PROMPT", prompt_text(prompt)), block("RESPONSE", graded)


@reward(name="llm_judge_rubric", timeout_s=180, max_concurrency=16, cache=True, capabilities=(EXPENSIVE,))
async def llm_judge_rubric(*, prompt: Any = None, response: str = "", messages: Sequence[Any] | None = None,
                           base_url: str, model: str, criteria: Sequence[Any], max_criteria: int = 4,
                           template: str = DEFAULT_RUBRIC_TEMPLATE, samples: int = 1,
                           aggregate: str = "majority", max_calls: int | None = None,
                           **kwargs: Any) -> dict[str, Any]:
    """The weighted share of ``criteria`` the response meets (see the module's docstring).

    Kwargs: ``criteria`` (strings or ``{text, weight, name}``), ``max_criteria`` per call, ``samples`` and
    ``aggregate`` (each criterion's verdict voted over ``samples`` asks), ``max_calls`` (a sample that
    needs more calls fails before any), ``max_in_flight``, and ``llm_judge``'s endpoint kwargs.
    """
    import asyncio

    crit = _criteria(criteria)
    check_voting("llm_judge_rubric", samples, aggregate, template, ("criteria",))
    if int(max_criteria) < 1:
        raise UsageError(f"llm_judge_rubric max_criteria={max_criteria!r}: give 1 or more")
    chunks = [list(range(k, min(k + int(max_criteria), len(crit)))) for k in range(0, len(crit),
                                                                                     int(max_criteria))]
    tally = Tally()
    if max_calls is not None and len(chunks) * samples > max_calls:
        return {"score": None, "failed": f"judge call failed (max_calls): {len(crit)} criteria at "
                f"max_criteria {max_criteria} x samples {samples} need {len(chunks) * samples} calls; "
                f"max_calls is {max_calls}", **tally.extra()}
    ep = Endpoint.of({**kwargs, "base_url": base_url, "model": model}, max_tokens=64 + 48 * int(max_criteria))
    ptext, rtext = _sample_text(prompt, response, messages)
    gtext = reference_block(kwargs.get("ground_truth"))

    async def one(chunk: list[int], k: int) -> dict[int, tuple[float, str]]:
        listing = "\n".join(f"Criterion {j + 1}: {crit[i][1]}" for j, i in enumerate(chunk))
        user = fill(template, "llm_judge_rubric", prompt=ptext, response=rtext, ground_truth=gtext,
                     criteria=listing)
        reply = await ask(user, ep, tally, cache_key=["rubric", k])
        got = {}
        for j, i in enumerate(chunk):
            found = re.findall(rf"(?im)criterion\s*{j + 1}\s*[:=]\s*\**\s*(yes|no)\b\**\s*[-:,.]?\s*(.*)$",
                               reply.text)
            if not found:
                raise fail(tally, no_verdict(reply.text, f"verdict for criterion {j + 1} ({crit[i][0]})"))
            yes, reason = found[-1]
            got[i] = (1.0 if yes.lower() == "yes" else 0.0, reason.strip()[:300])
        remember(reply)
        return got

    asks = await asyncio.gather(*(one(c, k) for c in chunks for k in range(samples)), return_exceptions=True)
    for a in asks:
        if isinstance(a, BaseException):
            if isinstance(a, JudgeFailure):
                return {"score": None, "failed": str(a), **tally.extra()}
            raise a
    done = [a for a in asks if isinstance(a, dict)]
    met = {i: vote([a[i][0] for a in done if i in a], aggregate) for i in range(len(crit))}
    reasons = {i: next(a[i][1] for a in done if i in a) for i in range(len(crit))}
    total = sum(w for _, _, w in crit)
    score = sum(met[i] * w for i, (_, _, w) in enumerate(crit)) / total
    extra: dict[str, Any] = {f"criterion/{name}": met[i] for i, (name, _, _) in enumerate(crit)}
    extra["criteria"] = [{"name": name, "weight": w, "met": met[i], "reason": reasons[i]}
                         for i, (name, _, w) in enumerate(crit)]
    return {"score": score, **extra, **tally.extra()}


def _from_logprobs(top: Mapping[str, float], low: float, high: float) -> float | None:
    """The expected score: each whole-number token in range weighed by its probability (``None``: no
    such token among them)."""
    probs: dict[float, float] = {}
    for token, lp in top.items():
        t = token.strip()
        if t.lstrip("-").isdigit() and low <= float(t) <= high:
            probs[float(t)] = probs.get(float(t), 0.0) + math.exp(lp)
    mass = sum(probs.values())
    return sum(v * p for v, p in probs.items()) / mass if mass > 0 else None


@reward(name="llm_judge_sampled", timeout_s=120, max_concurrency=32, cache=True, capabilities=(EXPENSIVE,))
async def llm_judge_sampled(*, prompt: Any = None, response: str = "", messages: Sequence[Any] | None = None,
                            base_url: str, model: str, template: str | None = None,
                            score_regex: str | None = None, score_range: Sequence[float] = (0, 10),
                            samples: int = 1, aggregate: str = "mean", score_from: str = "text",
                            top_logprobs: int = 20, **kwargs: Any) -> dict[str, Any]:
    """``llm_judge``'s score, asked ``samples`` times and aggregated (``mean | median | majority``);
    ``score_from: logprobs`` reads it from the ``top_logprobs`` of the score's token (the expected value
    over the numbers in ``score_range``), as vLLM's OpenAI server returns them.
    """
    import asyncio

    if score_from not in ("text", "logprobs"):
        raise UsageError(f"llm_judge_sampled score_from={score_from!r} is not valid\nallowed: text, logprobs")
    check_voting("llm_judge_sampled", samples, aggregate, template or "{}", ())
    low, high = valid_range(score_range)
    logp = score_from == "logprobs"
    ep = Endpoint.of({**kwargs, "base_url": base_url, "model": model,
                      "logprobs": top_logprobs if logp else 0}, max_tokens=8 if logp else 64)
    ptext, rtext = _sample_text(prompt, response, messages)
    chat = list(messages) if messages else [{"role": "user", "content": prompt_text(prompt)},
                                            {"role": "assistant", "content": text_of(response)}]
    user = fill(template or (_LOGPROB_TEMPLATE if logp else DEFAULT_TEMPLATE), "llm_judge_sampled",
                prompt=ptext, response=rtext, ground_truth=reference_block(kwargs.get("ground_truth")),
                messages=block("CHAT", render_messages(chat)), low=num(low), high=num(high))
    tally = Tally()

    async def one(k: int) -> float:
        reply = await ask(user, ep, tally, cache_key=["score", k, score_from])
        value: float | None
        if logp:
            value = _from_logprobs(reply.top, low, high)
            if value is None:
                raise fail(tally, JudgeFailure("no_logprobs", "the judge's reply has no top_logprobs with a "
                                               f"number in [{low:g}, {high:g}]: {reply.text[:120]!r}"))
        else:
            try:  # the verdict the template asks for (llm_judge's reading): none or two is a failure
                value = verdict(reply.text, low, high, regex=score_regex)
            except JudgeError as exc:
                raise fail(tally, JudgeFailure("no_verdict", str(exc))) from None
        remember(reply)
        return value

    got = await asyncio.gather(*(one(k) for k in range(samples)), return_exceptions=True)
    values = [v for v in got if not isinstance(v, BaseException)]
    for v in got:
        if isinstance(v, BaseException):
            if isinstance(v, JudgeFailure):
                return {"score": None, "failed": str(v), **tally.extra()}
            raise v
    return {"score": vote(values, aggregate), "judge_spread": max(values) - min(values), **tally.extra()}
