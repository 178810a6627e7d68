"""Trajectories: samples that carry the whole conversation.

A sample may hold ``messages``: the conversation in the OpenAI chat format (``system``, ``user``,
``assistant`` turns with ``tool_calls``, ``tool`` results). Per-turn data that a framework keeps
(``num_turns``, ``tool_rewards``, ``turn_scores``) and an environment's final state (``env_state``)
travel in the sample's ``extra_info``.

A reward says what it reads by its signature: one that takes ``messages`` is a *trajectory* reward,
any other a *text* reward. Both kinds score both sample shapes:

* a text reward on a trajectory gets the last assistant message's text as ``response``, and as
  ``prompt`` the messages before the first assistant turn (:func:`text_view`);
* a trajectory reward on a text sample gets one user and one assistant turn, the prompt's chat
  messages standing for the user turn when the prompt is a list of them (:func:`chat_of`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from .errors import UsageError
from .types import sample_name

__all__ = ["chat_of", "hermes_message", "message_text", "replies_of", "text_view", "tool_calls_of",
           "without_markers"]

#: ChatML's turn markers and end text, as a decode that keeps special tokens leaves them
_MARKERS = re.compile(r"<\|im_start\|>|<\|im_end\|>|<\|endoftext\|>")
_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def message_text(message: Mapping[str, Any]) -> str:
    """A message's text: its ``content`` string, or the text parts of a list of content parts."""
    content = message.get("content")
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        return "".join(str(p.get("text") or "") for p in content if isinstance(p, Mapping)
                       and p.get("type", "text") == "text")
    return str(content)


def _messages(value: Any, label: Any) -> list[Mapping[str, Any]]:
    if isinstance(value, (list, tuple)) and all(
            isinstance(m, Mapping) and isinstance(m.get("role"), str) for m in value):
        return list(value)
    shown = repr(value)
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    where = "" if label is None else f"{sample_name(label)}: "  # a reward's call names its sample itself
    raise UsageError(f"{where}'messages' is not a list of chat messages ({shown})\n"
                     "messages is a list of {role, content} dicts (OpenAI chat format: assistant "
                     "turns may hold tool_calls, tool results have role 'tool')")


def text_view(sample: Mapping[str, Any], label: Any) -> dict[str, Any]:
    """A trajectory sample as a text reward reads it: ``response`` the last assistant message's
    text, ``prompt`` the messages before the first assistant turn (each only where the sample
    does not set it).

    :raises UsageError: when ``messages`` is not a list of chat messages, or holds no assistant turn.
    """
    messages = _messages(sample["messages"], label)
    turns = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    if not turns:
        roles = ", ".join(m["role"] for m in messages) or "none"
        raise UsageError(f"{sample_name(label)}: its messages hold no assistant turn (roles: {roles}), so it "
                         "has no response to score\na trajectory needs at least one assistant message")
    out = dict(sample)
    out.setdefault("response", message_text(messages[turns[-1]]))
    out.setdefault("prompt", [dict(m) for m in messages[:turns[0]]])
    return out


def chat_of(sample: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The conversation a trajectory reward reads: the sample's ``messages``, or, for a text
    sample, its prompt (text as one user turn, or its chat messages) and one assistant turn.

    :raises UsageError: a text sample whose prompt is neither text nor chat messages.
    """
    messages = sample.get("messages")
    if messages is not None:
        return _messages(messages, None)
    prompt = sample.get("prompt")
    head: list[Mapping[str, Any]]
    if isinstance(prompt, str):
        head = [{"role": "user", "content": prompt}]
    elif isinstance(prompt, (list, tuple)) and prompt:
        head = _messages(prompt, None)
    else:
        raise UsageError(f"a trajectory reward reads messages; this sample has none, and its prompt "
                         f"({type(prompt).__name__} {prompt!r}) cannot stand for the user turn\n"
                         "give the sample 'messages', or a prompt (text or chat messages)")
    return [*head, {"role": "assistant", "content": sample.get("response")}]


def replies_of(messages: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """A conversation's completion, as TRL's conversational completions are: its messages from the
    first assistant turn on."""
    first = next((i for i, m in enumerate(messages) if m.get("role") == "assistant"), len(messages))
    return list(messages[first:])


def tool_calls_of(messages: Sequence[Mapping[str, Any]]) -> list[Any]:
    """Every assistant tool call of a conversation, in order (each ``{id?, type, function: {name,
    arguments}}``)."""
    return [c for m in messages if m.get("role") == "assistant" for c in (m.get("tool_calls") or ())]


def without_markers(text: str) -> str:
    """``text`` without ChatML's turn markers (``<|im_start|>``, ``<|im_end|>``, ``<|endoftext|>``)."""
    return _MARKERS.sub("", text)


def _hermes_call(body: str) -> dict[str, Any]:
    """One hermes tool call as an OpenAI one; a body that is not ``{"name", "arguments"}`` JSON keeps
    its text as the arguments and has no name (verl's parser drops it; a reward may want to see it)."""
    try:
        parsed = json.loads(body)
        name, arguments = parsed["name"], json.dumps(parsed["arguments"], ensure_ascii=False)
    except (ValueError, TypeError, KeyError):
        name, arguments = "", body.strip()
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


def hermes_message(text: str) -> dict[str, Any]:
    """A model's turn as generated text, with hermes tool calls (``<tool_call>{"name": ...,
    "arguments": {...}}</tool_call>``, the format of Qwen's templates and verl's default), as an OpenAI
    assistant message: its other text as ``content``, its calls as ``tool_calls``."""
    text = without_markers(text)
    message: dict[str, Any] = {"role": "assistant", "content": _CALL.sub("", text).strip()}
    calls = [_hermes_call(b) for b in _CALL.findall(text)]
    if calls:
        message["tool_calls"] = calls
    return message
