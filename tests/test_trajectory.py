"""Trajectories are samples (issue 36 §1): a sample may carry the whole conversation as ``messages``;
a reward says by its signature whether it reads it; both kinds score both sample shapes."""

from __future__ import annotations

import json

import pytest

import rewardhub
from rewardhub.cli import main
from rewardhub.execution.runner import Runner
from rewardhub.testing import make_registry


def _call(cid: str, name: str, arguments: str) -> dict:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": arguments}}


#: two agent episodes in the OpenAI chat format: three tool calls of which two are well formed, then
#: none at all
TRAJECTORIES = [
    {"messages": [
        {"role": "system", "content": "You can call add(a, b)."},
        {"role": "user", "content": "What is 2 + 2, then 3 + 3?"},
        {"role": "assistant", "content": "", "tool_calls": [_call("c1", "add", '{"a": 2, "b": 2}'),
                                                            _call("c2", "add", '{"a": 3, "b": ')]},
        {"role": "tool", "tool_call_id": "c1", "content": "4"},
        {"role": "tool", "tool_call_id": "c2", "content": "error: bad JSON"},
        {"role": "assistant", "content": "", "tool_calls": [_call("c3", "add", '{"a": 3, "b": 3}')]},
        {"role": "tool", "tool_call_id": "c3", "content": "6"},
        {"role": "assistant", "content": "4 and 6"}],
     "ground_truth": "4 and 6", "extra_info": {"num_turns": 7, "tool_rewards": [1.0, 0.0, 1.0]}},
    {"messages": [{"role": "user", "content": "Say hi"}, {"role": "assistant", "content": "hi"}],
     "ground_truth": "hello"},
]


@rewardhub.reward(name="turns_seen")
def turns_seen(*, messages, ground_truth=None, **kwargs):
    """How many turns a trajectory reward sees, and their roles."""
    return {"score": float(len(messages)), "roles": ",".join(m["role"] for m in messages)}


@rewardhub.reward(name="reply_length")
def reply_length(*, response, prompt=None, **kwargs):
    """The response's length and what the prompt was."""
    return {"score": float(len(response)), "prompt": json.dumps(prompt)}


class _Plugin:
    @rewardhub.hookimpl
    def rewardhub_register_rewards(self):
        return [turns_seen, reply_length]


@pytest.fixture(scope="module")
def runner():
    terms = [{"name": n} for n in ("tool_call_format", "exact_match", "turns_seen", "reply_length")]
    return Runner.from_config({"rewards": terms}, make_registry(_Plugin()))


def test_both_kinds_score_both_shapes(runner):
    text = {"prompt": "Say hi", "response": "hello", "ground_truth": "hello"}
    res = runner.score([*TRAJECTORIES, text])
    rows, extra = res.rewards, res.extra
    # the trajectory reward reads the tool calls: 2 of 3 well formed; none made: 0
    assert [r["tool_call_format"] for r in rows] == [pytest.approx(2 / 3), 0.0, 0.0]
    # a text reward on a trajectory reads the last assistant message
    assert [r["exact_match"] for r in rows] == [1.0, 0.0, 1.0]
    assert [r["reply_length"] for r in rows] == [7.0, 2.0, 5.0]
    assert json.loads(extra[0]["reply_length"]["prompt"])[1] == TRAJECTORIES[0]["messages"][1]
    # a trajectory reward on a text sample sees one user and one assistant turn
    assert [r["turns_seen"] for r in rows] == [8.0, 2.0, 2.0]
    assert extra[2]["turns_seen"]["roles"] == "user,assistant"


def test_a_trajectory_without_a_reply_is_one_clear_error(runner):
    with pytest.raises(rewardhub.UsageError, match="sample 0: its messages hold no assistant turn"):
        runner.score([{"messages": [{"role": "user", "content": "hi"}]}])
    with pytest.raises(rewardhub.UsageError, match="'messages' is not a list of chat messages"):
        runner.score([{"messages": "hi"}])


def test_a_trl_style_reward_gets_conversational_completions_and_a_missing_user_turn_is_named(tmp_path):
    reward = tmp_path / "trl_style.py"
    reward.write_text("def trl_style(prompts, completions, **kwargs):\n"
                      "    return [float(len(c)) if isinstance(c, list) else -1.0 for c in completions]\n")
    terms = [{"path": str(reward), "function": "trl_style"}, {"name": "tool_call_format"}]
    res = Runner.from_config({"rewards": terms}, make_registry()).score(
        [TRAJECTORIES[0], {"prompt": None, "response": "x"}])
    # the completion: the messages from the first reply on (6 of the 8), as TRL gives them; text stays text
    assert [r["trl_style"] for r in res.rewards] == [6.0, -1.0]
    assert "its prompt (NoneType None) cannot stand for the user turn" in res.errors[1]["tool_call_format"]


def test_list_and_show_say_what_a_reward_reads(capsys):
    assert main(["list", "--json", "--no-autoload"]) == 0
    reads = {r["name"]: r["reads"] for r in json.loads(capsys.readouterr().out)}
    assert reads["tool_call_format"] == "trajectory" and reads["exact_match"] == "text"
    assert main(["show", "tool_call_format", "--no-autoload"]) == 0
    assert "reads:         trajectory" in capsys.readouterr().out


@pytest.mark.parametrize("fmt", ["jsonl", "parquet", "hf"])
def test_score_reads_rows_holding_messages(tmp_path, fmt, capsys):
    data = tmp_path / "d"
    if fmt == "jsonl":
        data.write_text("".join(json.dumps(r) + "\n" for r in TRAJECTORIES))
    elif fmt == "parquet":  # a struct column: every message gets every key, None where it had none
        pa = pytest.importorskip("pyarrow")
        pytest.importorskip("pyarrow.parquet").write_table(pa.Table.from_pylist(TRAJECTORIES), data)
    else:
        pytest.importorskip("datasets").Dataset.from_list(TRAJECTORIES).save_to_disk(str(data))
    cfg = tmp_path / "c.yaml"
    cfg.write_text("reward:\n  plugins: {autoload: false}\n  rewards:\n    - name: tool_call_format\n"
                   "    - name: exact_match\n")
    out = tmp_path / "o.jsonl"
    assert main(["score", str(cfg), str(data), "-o", str(out)]) == 0, capsys.readouterr().err
    rows = [json.loads(line)["rewards"] for line in out.read_text().splitlines()]
    assert rows == [{"tool_call_format": pytest.approx(2 / 3), "exact_match": 1.0},
                    {"tool_call_format": 0.0, "exact_match": 0.0}]
