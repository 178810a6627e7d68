"""Format rewards: a regular expression match, and the ``<think>…</think>`` answer layout."""

from __future__ import annotations

import functools
import re
from typing import Any

from ..decorator import reward
from ..hookspecs import hookimpl

__all__ = ["regex_match", "think_format"]


@functools.lru_cache(maxsize=256)
def _compile(pattern: str, flags: int) -> re.Pattern[str]:
    return re.compile(pattern, flags)


def _flags(spec: str) -> int:
    table = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL, "x": re.VERBOSE}
    value = 0
    for ch in spec:
        if ch not in table:
            raise ValueError(f"unknown regex flag {ch!r}; use any of 'imsx'")
        value |= table[ch]
    return value


@reward(name="regex_match")
def regex_match(*, response: str, pattern: str = r"\\boxed\{.+\}", mode: str = "search",
                flags: str = "s", **kwargs: Any) -> float:
    """1.0 when the response matches a regular expression (kwargs ``pattern``, ``mode``), else 0.0.

    ``mode`` is ``search`` (anywhere), ``match`` (at the start) or ``fullmatch``; ``flags`` is a
    string of ``i``, ``m``, ``s``, ``x``.

    Example:

        >>> regex_match(response="so the answer is \\\\boxed{4}")
        1.0
        >>> regex_match(response="Answer: 4", pattern=r"^Answer: \\d+$", mode="fullmatch")
        1.0
    """
    if mode not in ("search", "match", "fullmatch"):
        raise ValueError(f"regex_match mode={mode!r} is not valid; use search, match or fullmatch")
    rx = _compile(pattern, _flags(flags))
    return 1.0 if getattr(rx, mode)(response or "") else 0.0


_THINK = re.compile(r"^\s*<think>(?P<think>.+?)</think>\s*(?P<answer>\S.*?)\s*$", re.DOTALL)


@reward(name="think_format")
def think_format(*, response: str, require_answer_tag: bool = False, **kwargs: Any) -> float:
    """1.0 for ``<think>reasoning</think> answer`` with exactly one think block, else 0.0.

    With ``require_answer_tag`` the answer must be wrapped in ``<answer>…</answer>``.

    Example:

        >>> think_format(response="<think>2+2 is 4</think> 4")
        1.0
        >>> think_format(response="4")
        0.0
    """
    text = response or ""
    if text.count("<think>") != 1 or text.count("</think>") != 1:
        return 0.0
    m = _THINK.match(text)
    if m is None or not m.group("think").strip():
        return 0.0
    if require_answer_tag:
        answer = m.group("answer")
        return 1.0 if re.fullmatch(r"<answer>.+?</answer>", answer, re.DOTALL) else 0.0
    return 1.0


@hookimpl
def rewardhub_register_rewards() -> list[Any]:
    return [regex_match, think_format]
