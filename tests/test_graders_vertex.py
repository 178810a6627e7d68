"""Vertex AI reinforcement-tuning reward configs read as graders (issue 46): string match with response
parsing, code execution in the sandbox, an autorater on the stub endpoint, composite weights, rewards
clipped to [-1, 1]; the configs public SDK tests and repositories show."""

from __future__ import annotations

from pathlib import Path

import pytest
from judge_stub import StubJudge

from rewardhub.execution import Runner
from rewardhub.graders import grader_problems
from rewardhub.graders import read_grader_file
from rewardhub.graders import run_answer

DATA = Path(__file__).parent / "data" / "graders" / "vertex"
INVALID = {
    "invalid_cloud_run.json": ["cloud_run_reward_scorer"],
    "invalid_sdk_composite_code_without_evaluate.json": [
        "graders.codeReward.code_execution_reward_scorer.python_code_snippet"
    ],
}


@pytest.mark.parametrize(
    "path", sorted(p for p in DATA.glob("*.json") if not p.name.startswith("invalid_")), ids=lambda p: p.name
)
def test_every_valid_vertex_config_validates(path):
    assert grader_problems(read_grader_file(str(path))) == []


@pytest.mark.parametrize("name", sorted(INVALID))
def test_an_invalid_vertex_config_is_refused_with_the_field(name):
    problems = grader_problems(read_grader_file(str(DATA / name)))
    assert [p.split(":")[0] for p in problems] == INVALID[name], problems


def test_a_composite_is_a_weighted_sum_of_its_parsed_string_matches():
    rows = [
        {"response": r, "extra_info": {"ground_truth_answer": "391"}}
        for r in ("17*23 is 391.\nAnswer: 391", "Answer: 390", "I think 391")
    ]
    with Runner.from_config({"rewards": [{"grader": str(DATA / "rest_composite.json")}]}) as runner:
        res = runner.score(rows)
    assert res.scores == pytest.approx([1.0, -0.4, -1.0])
    assert res.extra[1]["rest_composite"] == {"final_answer": -1.0, "answer_format": 1.0}


@pytest.mark.parametrize(
    "op, expression, text, want",
    [
        ("EXACT_MATCH", "{{references.answer}}", "42", 1.0),
        ("EXACT_MATCH", "{{references.answer}}", "42 ", -1.0),
        ("PARTIAL_MATCH", "{{references.answer}}", "it is 42.", 1.0),
        ("PARTIAL_MATCH", "43", "it is 42.", -1.0),
        ("REGEX_CONTAINS", r"\b4\d\b", "it is 42.", 1.0),
        ("REGEX_CONTAINS", r"^42$", "it is 42.", -1.0),
    ],
)
def test_string_match_operations(op, expression, text, want):
    spec = {
        "rewardName": "m",
        "stringMatchRewardScorer": {
            "correctAnswerReward": 1,
            "wrongAnswerReward": -1,
            "stringMatchExpression": {"matchOperation": op, "expression": expression},
        },
    }
    assert run_answer(read_grader_file_of(spec), {"answer": "42"}, {"output_text": text})["reward"] == want


def read_grader_file_of(doc):
    from rewardhub.graders import grader_of

    return grader_of(doc, "test")


def test_a_json_match_reads_the_key_and_a_missing_key_is_a_parse_error():
    spec = read_grader_file_of(
        {
            "reward_name": "j",
            "string_match_reward_scorer": {
                "correct_answer_reward": 0.5,
                "json_match_expression": {
                    "key_name": "city",
                    "value_string_match_expression": {
                        "match_operation": "EXACT_MATCH",
                        "expression": "{{references.city}}",
                    },
                },
            },
        }
    )
    assert run_answer(spec, {"city": "Oslo"}, {"output_text": '{"city": "Oslo"}'})["reward"] == 0.5
    assert (
        run_answer(spec, {"city": "Oslo"}, {"output_text": '{"town": "Oslo"}'})["metadata"]["errors"][
            "sample_parse_error"
        ]
        is True
    )


@pytest.mark.timeout(120)
def test_code_execution_runs_evaluate_in_the_sandbox_and_is_clipped():
    pytest.importorskip("rewardhub_code")
    snippet = (
        "def evaluate(example, response):\n"
        "    got = response['parts'][0]['text']\n"
        "    return 5.0 if got == example['references']['answer'] else -3.0\n"
    )
    spec = read_grader_file_of(
        {"rewardName": "code", "codeExecutionRewardScorer": {"pythonCodeSnippet": snippet}}
    )
    assert run_answer(spec, {"answer": "42"}, {"output_text": "42"})["reward"] == 1.0
    assert run_answer(spec, {"answer": "42"}, {"output_text": "41"})["reward"] == -1.0


@pytest.mark.timeout(60)
def test_an_autrater_asks_the_endpoint_and_scores_its_parsed_reply():
    stub = StubJudge(
        lambda body, n: (200, "Verdict: good" if "42" in body["messages"][0]["content"] else "Verdict: poor")
    )
    try:
        spec = {
            "rewardName": "judge",
            "autoraterScorer": {
                "autoraterConfig": {"autoraterModel": "rater"},
                "autoraterPrompt": "Rate the response: {{response}}",
                "autoraterResponseParseConfig": {
                    "parseType": "REGEX_EXTRACT",
                    "regexExtractExpression": r"Verdict: (\w+)",
                },
                "exactMatchScorer": {
                    "correctAnswerReward": 1.0,
                    "wrongAnswerReward": -0.5,
                    "expression": "good",
                },
            },
        }
        rows = [{"response": r} for r in ("it is 42", "no idea")]
        with Runner.from_config({"rewards": [{"grader": spec, "base_url": stub.url}]}) as runner:
            res = runner.score(rows)
        assert res.scores == [1.0, -0.5]
        assert stub.requests[0]["body"]["model"] == "rater"
        assert {r["body"]["messages"][0]["content"] for r in stub.requests} == {
            "Rate the response: it is 42",
            "Rate the response: no idea",
        }
    finally:
        stub.close()
