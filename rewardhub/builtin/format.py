"""Format rewards: a regular expression match, the ``<think>…</think>`` answer layout, and (a trajectory
reward) well-formed tool calls."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from typing import Any

from ..decorator import reward
from ..hookspecs import hookimpl
from ..trajectory import tool_calls_of

__all__ = ["regex_match", "think_format", "tool_call_format"]


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


def _not_json(token: str) -> Any:
    raise ValueError(f"{token} is not JSON")  # Python's json reads NaN and Infinity; JSON has neither


def _tool_names(tools: Any) -> frozenset[str] | None:
    """``tools`` as a set of whole names: a list of names, or one string (``"calculator_v2"``, or
    ``"a, b"``: names separated by commas)."""
    if tools is None:
        return None
    if isinstance(tools, str):
        return frozenset(t.strip() for t in tools.split(",") if t.strip())
    if isinstance(tools, list | tuple | set | frozenset) and all(isinstance(t, str) for t in tools):
        return frozenset(tools)
    raise ValueError(f"tools={tools!r}: give a tool name or a list of tool names")


def _well_formed(call: Any, tools: frozenset[str] | None) -> bool:
    fn = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str) or not fn["name"]:
        return False
    if tools is not None and fn["name"] not in tools:
        return False
    args = fn.get("arguments")
    if isinstance(args, str):
        try:
            args = json.loads(args, parse_constant=_not_json)
        except ValueError:
            return False
    return isinstance(args, Mapping)


@reward(name="tool_call_format")
def tool_call_format(*, messages: list[dict[str, Any]], tools: list[str] | None = None,
                     no_calls: float = 0.0, **kwargs: Any) -> float:
    """The share of the assistant's tool calls that are well formed: a function name (one of
    ``tools`` when given: a list of names, or a string of names separated by commas; whole names only)
    and arguments that are a JSON object (``NaN`` and ``Infinity`` are not JSON); ``no_calls`` when it
    made none.

    Example:

        >>> call = {"type": "function", "function": {"name": "add", "arguments": '{"a": 1}'}}
        >>> tool_call_format(messages=[{"role": "user", "content": "1+1?"},
        ...                            {"role": "assistant", "content": "", "tool_calls": [call]}])
        1.0
    """
    names = _tool_names(tools)
    calls = tool_calls_of(messages)
    if not calls:
        return no_calls
    return sum(_well_formed(c, names) for c in calls) / len(calls)


@hookimpl
def rewardhub_register_rewards() -> list[Any]:
    return [regex_match, think_format, tool_call_format]
