"""A grader term in the frameworks (issue 46): ``to_trl`` and ``to_verl`` of a grader file give the numbers
``Runner.score`` gives for the same rows, and TRL's dataset columns reach ``{{ item.x }}`` by their names
(the ground-truth column too)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rewardhub.adapters import to_trl
from rewardhub.adapters import to_verl
from rewardhub.execution import Runner

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "graders" / "answer_multi.json"
COMPLETIONS = ["12", "it is 12", "21", "twelve", ""]


def test_the_example_grader_is_the_same_in_score_trl_and_verl(tmp_path):
    rows = [{"prompt": "7 + 5 =", "response": c, "ground_truth": "12"} for c in COMPLETIONS]
    with Runner.from_config({"rewards": [{"grader": str(EXAMPLE)}]}) as runner:
        want = runner.score(rows).scores
    assert want[0] == pytest.approx(1.0) and want[-1] == pytest.approx(0.0) and 0 < want[2] < 0.7
    trl = to_trl({"grader": str(EXAMPLE)})
    got = trl(
        prompts=["7 + 5 ="] * len(COMPLETIONS), completions=COMPLETIONS, answer=["12"] * len(COMPLETIONS)
    )
    assert got == pytest.approx(want)
    verl = to_verl({"grader": str(EXAMPLE)})
    assert [verl("arith", c, "12", {})["score"] for c in COMPLETIONS] == pytest.approx(want)


def test_trl_columns_reach_the_item_by_their_names_the_ground_truth_column_too(tmp_path):
    grader = tmp_path / "g.json"
    grader.write_text(
        json.dumps(
            {
                "type": "string_check",
                "name": "g",
                "operation": "eq",
                "input": "{{ sample.output_text }}",
                "reference": "{{ item.answer }}/{{ item.unit }}",
            }
        )
    )
    trl = to_trl({"grader": str(grader)})
    got = trl(prompts=["p", "p"], completions=["12/kg", "12/g"], answer=["12", "12"], unit=["kg", "kg"])
    assert got == [1.0, 0.0]
