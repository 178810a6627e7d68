"""A TRL completion that cannot be scored fails that sample, not the batch (issue 42 §6): one
conversational completion with no assistant turn (only a tool result) gets None, TRL's "not scored",
and is counted in ``<name>/failed``; the other completions of the call keep their rewards."""

from __future__ import annotations

import pytest

from rewardhub.adapters import to_trl


@pytest.mark.timeout(60)
def test_a_completion_with_no_assistant_turn_fails_only_that_sample(tmp_path):
    path = tmp_path / "turns.py"
    path.write_text("def turns(*, messages, **kw):\n    return float(len(messages))\n")
    func = to_trl({"path": str(path), "function": "turns"})
    prompts = [[{"role": "user", "content": "q"}]] * 3
    completions = [
        [{"role": "assistant", "content": "a"}],
        [{"role": "tool", "content": "4"}],  # nothing the model said: no response to score
        [{"role": "assistant", "content": "b"}, {"role": "tool", "content": "5"},
         {"role": "assistant", "content": "c"}],
    ]
    logged = {}
    got = func(prompts=prompts, completions=completions, log_metric=logged.__setitem__)
    assert got == [2.0, None, 4.0]
    assert logged == {"turns/failed": 1.0}
