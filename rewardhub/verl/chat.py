"""verl's agent-loop trajectory as OpenAI chat messages.

verl 0.9.1's ``ToolAgentLoop`` keeps its conversation only while it runs: what reaches a reward is
``raw_prompt`` (the prompt's messages) and the response tokens, in which the model's turns and the
tool results the loop appended follow each other as the chat template renders them. With its
default ``hermes`` tool format a tool call is ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``
in an assistant turn, and the tool results of a turn come back as one ``user`` turn holding a
``<tool_response>...</tool_response>`` each. :func:`verl_chat` reads the messages back from that text,
decoded with or without the template's special tokens (ChatML's ``<|im_start|>`` / ``<|im_end|>``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from ..trajectory import hermes_message
from ..trajectory import without_markers

__all__ = ["verl_chat"]

#: the tool results of one turn, between two model turns (or at the end, where the loop stopped)
_TOOL_TURN = re.compile(r"\s*\buser\n((?:\s*<tool_response>.*?</tool_response>)+)\s*(?:\bassistant\n|$)",
                        re.DOTALL)
_RESULT = re.compile(r"<tool_response>\n?(.*?)\n?</tool_response>", re.DOTALL)


def verl_chat(raw_prompt: Sequence[Mapping[str, Any]], response: str) -> list[dict[str, Any]]:
    """The conversation of one verl trajectory: ``raw_prompt``'s messages, then the turns read back
    from the decoded ``response`` (assistant turns with their ``tool_calls``, one ``tool`` message per
    tool result)."""
    parts = _TOOL_TURN.split(without_markers(response))
    messages = [dict(m) for m in raw_prompt]
    for k, part in enumerate(parts):
        if k % 2:
            messages += [{"role": "tool", "content": r} for r in _RESULT.findall(part)]
        elif part.strip() or k == 0:
            messages.append(hermes_message(part))
    return messages
