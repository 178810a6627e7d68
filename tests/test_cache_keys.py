"""The reward cache's key holds everything the reward reads (issue 42 §2): a trajectory's whole
``messages`` (tool calls included), for a reward that reads only ``messages``, for one with ``**kwargs``
and for ``llm_judge`` with ``{messages}`` in its template."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from judge_stub import StubJudge

from rewardhub.execution import Runner

QUESTION = {"role": "user", "content": "What is 2+3?"}
FINAL = {"role": "assistant", "content": "It is 5."}


def _call(name: str, arguments: str) -> dict[str, object]:
    return {"id": "c1", "type": "function", "function": {"name": name, "arguments": arguments}}


def _chat(call: dict[str, object]) -> dict[str, object]:
    """A trajectory: the same question and final answer, with ``call`` in between."""
    return {"messages": [QUESTION, {"role": "assistant", "content": "", "tool_calls": [call]},
                         {"role": "tool", "tool_call_id": "c1", "content": "5"}, FINAL],
            "ground_truth": "5"}


GOOD = _chat(_call("add", '{"a": 2, "b": 3}'))
BAD = _chat(_call("add", "a=2, b=3"))  # arguments that are not a JSON object


@pytest.mark.parametrize("executor", ["inline", "thread", "process"])
def test_tool_call_format_with_cache_tells_two_chats_by_their_tool_calls(executor):
    term = {"name": "tool_call_format", "cache": True, "executor": executor}
    with Runner.from_config({"rewards": [term]}) as runner:
        assert runner.score([GOOD, BAD]).scores == [1.0, 0.0]
        assert runner.score([BAD, GOOD]).scores == [0.0, 1.0]  # the second batch: hits, each its own


def test_a_reward_that_reads_only_messages_is_called_once_per_distinct_chat(tmp_path: Path):
    log = tmp_path / "calls.txt"
    (tmp_path / "r.py").write_text(textwrap.dedent(f'''
        import json
        def count_calls(*, messages):
            with open({str(log)!r}, "a") as f:
                f.write(json.dumps(messages) + "\\n")
            return float(sum(len(m.get("tool_calls") or ()) for m in messages))
    '''))
    three = _chat(_call("add", '{"a": 2}'))
    three["messages"][1]["tool_calls"] *= 3  # type: ignore[index]
    term = {"path": str(tmp_path / "r.py"), "function": "count_calls", "cache": True}
    with Runner.from_config({"rewards": [term]}) as runner:
        assert runner.score([GOOD, three, GOOD]).scores == [1.0, 3.0, 1.0]
    assert len(log.read_text().splitlines()) == 2  # GOOD twice in one batch: one call


def test_a_text_sample_read_as_a_chat_keys_by_its_prompt_and_response(tmp_path: Path):
    (tmp_path / "r.py").write_text("def n(*, messages):\n    return float(len(messages[-1]['content']))\n")
    term = {"path": str(tmp_path / "r.py"), "function": "n", "cache": True}
    samples = [{"prompt": "p", "response": "ab"}, {"prompt": "p", "response": "abcd"}]
    with Runner.from_config({"rewards": [term]}) as runner:
        assert runner.score(samples).scores == [2.0, 4.0]


@pytest.mark.timeout(120)
def test_llm_judge_with_messages_in_its_template_asks_once_per_distinct_chat():
    stub = StubJudge(lambda body, n: (200, "Score: 9" if '"a": 2' in body["messages"][1]["content"]
                                      else "Score: 1"))
    try:
        kw = {"base_url": stub.url, "model": "m", "template": "Grade:\n{messages}\nScore: N, {low}..{high}"}
        with Runner.from_config({"rewards": [{"name": "llm_judge", "kwargs": kw}]}) as runner:
            res = runner.score([GOOD, BAD, GOOD])
        assert res.scores == [9.0, 1.0, 9.0]
        assert len(stub.requests) == 2
        chats = [re.search(r"\[tool call\] add\((.*)\)", r["body"]["messages"][1]["content"]).group(1)
                 for r in stub.requests]
        assert sorted(chats) == ['a=2, b=3', '{"a": 2, "b": 3}']
    finally:
        stub.close()
