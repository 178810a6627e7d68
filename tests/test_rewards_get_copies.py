"""A reward that edits what it is given (``extra_info``, a chat prompt, a list ground truth) edits
its own copy: the rows ``score`` writes and what the other terms see are the input, on every
executor."""

from __future__ import annotations

import json

import pytest

REWARDS = '''
def edits(*, prompt, ground_truth, extra_info, **kwargs):
    """Changes every mutable thing it was given, then scores."""
    extra_info["tag"] = "edited"
    extra_info["tags"].append("edited")
    extra_info.pop("keep", None)
    prompt.append({"role": "user", "content": "edited"})
    ground_truth.clear()
    return 1.0


def edits_batch(*, extra_infos, **kwargs):
    n = len(extra_infos)  # the process executor may hand a batch over in chunks
    for info in extra_infos:
        info["tag"] = "edited"
        info["tags"].append("edited")
    extra_infos.clear()
    return [1.0] * n


def reads(*, prompt, ground_truth, extra_info, **kwargs):
    """Sees what the input says (1.0) or an edited copy (0.0)."""
    same = (extra_info == {"tag": "original", "tags": ["a"], "keep": 1} and len(prompt) == 1
            and ground_truth == [1, 2])
    return 1.0 if same else 0.0
'''


@pytest.mark.timeout(120)
@pytest.mark.parametrize("function", ["edits", "edits_batch"])
@pytest.mark.parametrize("executor", ["inline", "thread", "process"])
def test_written_rows_are_the_input_rows_whatever_the_reward_edits(cli, tmp_path, executor, function):
    rfile = tmp_path / "editing_rewards.py"
    rfile.write_text(REWARDS)
    kind = "\n      kind: batched" if function == "edits_batch" else ""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        f"reward:\n  rewards:\n"
        f"    - path: {rfile}\n      function: {function}\n      executor: {executor}{kind}\n"
        f"    - path: {rfile}\n      function: reads\n      executor: {executor}\n"
    )
    rows = [{"prompt": [{"role": "user", "content": f"q{i}"}], "response": f"r{i}", "ground_truth": [1, 2],
             "data_source": "d", "extra_info": {"tag": "original", "tags": ["a"], "keep": 1}}
            for i in range(3)]
    data = tmp_path / "in.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out.jsonl"
    res = cli("score", str(cfg), str(data), "-o", str(out))
    assert res.returncode == 0, res.stderr
    written = [json.loads(line) for line in out.read_text().splitlines()]
    assert [{k: w[k] for k in rows[0]} for w in written] == rows
    assert [w["rewards"]["reads"] for w in written] == [1.0, 1.0, 1.0]  # the next term sees the input
