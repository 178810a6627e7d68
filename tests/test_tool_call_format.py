"""``tool_call_format``: ``tools`` names whole tools (a string is a name, or names separated by commas),
and arguments are JSON only as JSON has it (``NaN`` and ``Infinity`` are not) (issue 42 §6)."""

from __future__ import annotations

import pytest

from rewardhub.builtin.format import tool_call_format


def _calls(*calls: tuple[str, str]) -> list[dict[str, object]]:
    return [{"role": "user", "content": "1+1?"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"type": "function", "function": {"name": n, "arguments": a}} for n, a in calls]}]


@pytest.mark.parametrize("tools,expected", [
    ("calculator_v2", 0.5),  # "calculator" is a substring of the string, not one of its names
    (["calculator_v2"], 0.5),
    ("calculator, calculator_v2", 1.0),
    ("calc", 0.0),
    (None, 1.0),
])
def test_tools_match_whole_names(tools, expected):
    messages = _calls(("calculator", '{"a": 1}'), ("calculator_v2", '{"a": 1}'))
    assert tool_call_format(messages=messages, tools=tools) == expected


@pytest.mark.parametrize("arguments,ok", [
    ('{"a": NaN}', False), ('{"a": Infinity}', False), ('{"a": -Infinity}', False),
    ('{"a": 1.5e3}', True), ('{"a": "NaN"}', True), ("[1]", False), ("{", False),
])
def test_arguments_are_json(arguments, ok):
    assert tool_call_format(messages=_calls(("f", arguments))) == (1.0 if ok else 0.0)


def test_tools_of_another_type_is_an_error():
    with pytest.raises(ValueError, match="tools=3"):
        tool_call_format(messages=_calls(("f", "{}")), tools=3)
