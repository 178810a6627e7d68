"""A row whose only conversation is a verifiers trace in ``extra_info.trace`` (a trace, or a whole line
of verifiers' ``traces.jsonl``) is read as a trajectory: its messages are the trace's (issue 43 §6)."""

from __future__ import annotations

import json
from pathlib import Path

from rewardhub.scoring import read_pairs

CALL = {"id": "c1", "name": "calc", "arguments": "{\"e\": \"1+4\"}"}  # verifiers keeps a tool call flat
NODES = [{"message": {"role": "user", "content": "what is 1+4?"}, "sampled": False},
         {"parent": 0, "message": {"role": "assistant", "content": "", "tool_calls": [CALL]},
          "sampled": True},
         {"parent": 1, "message": {"role": "tool", "tool_call_id": "c1", "content": "5"}, "sampled": False},
         {"parent": 2, "message": {"role": "assistant", "content": "It is 5."}, "sampled": True}]
TRACE = {"version": 1, "task": {"type": "T", "data": {"prompt": "what is 1+4?"}}, "nodes": NODES}


def test_a_trace_alone_is_a_trajectory(tmp_path: Path) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"extra_info": {"trace": TRACE}}) + "\n"
                    + json.dumps({"extra_info": {"trace": {"env": {"id": "t"}, "traces": [TRACE]}}}) + "\n")
    pairs = list(read_pairs(str(rows)))
    assert len(pairs) == 2
    for row, sample in pairs:
        assert "messages" not in row  # the row written out is the row read
        assert [m["role"] for m in sample["messages"]] == ["user", "assistant", "tool", "assistant"]
        assert sample["messages"][1]["tool_calls"] == [
            {"id": "c1", "type": "function", "function": {"name": "calc", "arguments": "{\"e\": \"1+4\"}"}}]
        assert sample["messages"][-1]["content"] == "It is 5."
