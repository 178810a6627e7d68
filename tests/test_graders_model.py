"""Model-backed graders (issue 46): ``score_model``, ``label_model`` and ``cosine`` against a real aiohttp
OpenAI-compatible stub on 127.0.0.1 (tests/judge_stub.py): every reply a reward or its flag, the endpoint
from the term or OPENAI_BASE_URL / OPENAI_API_KEY, the key kept out of errors."""

from __future__ import annotations

import json
import math

import pytest
from judge_stub import StubJudge

from rewardhub.execution import Runner

OUT, REF = "{{ sample.output_text }}", "{{ item.reference_answer }}"
SCORE = {
    "type": "score_model",
    "name": "s",
    "model": "judge",
    "range": [0, 1],
    "input": [
        {"role": "developer", "content": "Grade it."},
        {"role": "user", "content": f"Reference: {REF}. Model answer: {OUT}"},
    ],
    "sampling_params": {
        "seed": 42,
        "temperature": 0,
        "max_completions_tokens": 99,
        "reasoning_effort": "low",
    },
}
LABEL = {
    "type": "label_model",
    "name": "l",
    "model": "judge",
    "labels": ["positive", "neutral", "negative"],
    "passing_labels": ["positive"],
    "input": [
        {"type": "message", "role": "user", "content": {"type": "input_text", "text": f"Statement: {OUT}"}}
    ],
}


@pytest.fixture(scope="module")
def stub():
    server = StubJudge()
    yield server
    server.close()


def reply(result) -> str:
    return json.dumps({"steps": [{"description": "d", "conclusion": "c"}], "result": result})


def graded(stub, spec, responses, term=None):
    rows = [{"response": r, "extra_info": {"reference_answer": "Paris"}} for r in responses]
    with Runner.from_config({"rewards": [{"grader": spec, "base_url": stub.url, **(term or {})}]}) as runner:
        return runner.score(rows)


@pytest.mark.timeout(60)
def test_score_model_sends_the_templated_input_and_reads_result(stub):
    stub.reset(lambda body, n: (200, reply(0.75)))
    res = graded(stub, SCORE, ["Paris!"])
    assert res.rewards == [{"s": 0.75}] and res.errors == [{}]
    body = stub.requests[0]["body"]
    assert body["model"] == "judge" and body["seed"] == 42 and body["max_tokens"] == 99
    assert body["reasoning_effort"] == "low" and body["temperature"] == 0
    assert body["messages"] == [
        {"role": "system", "content": "Grade it."},
        {"role": "user", "content": "Reference: Paris. Model answer: Paris!"},
    ]
    schema = body["response_format"]["json_schema"]["schema"]
    assert schema["required"] == ["steps", "result"] and schema["properties"]["result"] == {"type": "number"}


@pytest.mark.timeout(60)
def test_every_reply_is_a_reward_or_a_flag_never_a_silent_number(stub):
    replies = {
        "a": (200, reply(0.5)),
        "b": (200, reply(7)),
        "c": (200, "Score: 7"),
        "d": (200, reply("high")),
        "e": (200, "```json\n" + reply(1) + "\n```"),
        "f": (
            200,
            "raw:"
            + json.dumps(
                {
                    "choices": [
                        {
                            "index": 0,
                            "message": {
                                "role": "assistant",
                                "content": None,
                                "refusal": "I can't grade that.",
                            },
                        }
                    ]
                }
            ),
        ),
        "g": (400, "bad request"),
        "h": (200, json.dumps({"result": None})),
    }
    stub.reset(lambda body, n: replies[body["messages"][1]["content"][-1]])
    res = graded(stub, SCORE, list(replies))
    got = {r: (row["s"], kinds.get("s")) for r, row, kinds in zip(replies, res.rewards, res.error_kinds)}
    assert got["a"] == (0.5, None) and got["e"] == (1.0, None)
    assert got["b"] == (1.0, None)  # outside range: cut to it, as the guide says
    for r, kind in (
        ("c", "model_grader_parse_error"),
        ("d", "model_grader_parse_error"),
        ("f", "model_grader_refusal_error"),
        ("g", "model_grader_server_error"),
        ("h", "model_grader_parse_error"),
    ):
        value, flag = got[r]
        assert flag == kind and (value is None or math.isnan(value)), (r, got[r])
    assert "token limit" not in res.errors[2]["s"]


@pytest.mark.timeout(60)
def test_a_reply_cut_at_the_token_limit_says_so(stub):
    cut = json.dumps({"choices": [{"index": 0, "finish_reason": "length",
                                   "message": {"role": "assistant", "content": '{"steps": [{"descr'}}]})
    stub.reset(lambda body, n: (200, "raw:" + cut))
    res = graded(stub, SCORE, ["x"])
    assert res.error_kinds == [{"s": "model_grader_parse_error"}] and "token limit" in res.errors[0]["s"]


@pytest.mark.timeout(60)
def test_label_model_passes_the_passing_labels_and_flags_any_other(stub):
    answers = {"good": "positive", "meh": "neutral", "odd": "sarcastic"}
    stub.reset(lambda body, n: (200, reply(answers[body["messages"][0]["content"][0]["text"].split()[-1]])))
    res = graded(stub, LABEL, list(answers), term={"on_failure": "zero"})
    assert [row["l"] for row in res.rewards] == [1.0, 0.0, 0.0]
    assert res.error_kinds == [{}, {}, {"l": "model_grader_parse_error"}]  # the 0 keeps its flag
    assert stub.requests[0]["body"]["response_format"]["json_schema"]["schema"]["properties"]["result"][
        "enum"
    ] == ["positive", "neutral", "negative"]


@pytest.mark.timeout(60)
def test_the_endpoint_comes_from_openai_base_url_and_the_key_never_shows(stub, monkeypatch):
    key = "sk-test-" + "x" * 24
    monkeypatch.setenv("OPENAI_BASE_URL", stub.url)
    monkeypatch.setenv("OPENAI_API_KEY", key)
    stub.reset(lambda body, n: (200, reply(1)) if n == 0 else (400, f"unknown key {key}"))
    with Runner.from_config({"rewards": [{"grader": SCORE}]}) as runner:
        res = runner.score(
            [
                {"response": "a", "extra_info": {"reference_answer": "a"}},
                {"response": "b", "extra_info": {"reference_answer": "b"}},
            ]
        )
    assert stub.requests[0]["headers"]["Authorization"] == f"Bearer {key}"
    assert res.rewards[0] == {"s": 1.0} and res.error_kinds[1] == {"s": "model_grader_server_error"}
    assert key not in json.dumps(res.errors) and "<api key>" in res.errors[1]["s"]
    # a term's api_key_env wins over OPENAI_API_KEY
    monkeypatch.setenv("MY_GRADER_KEY", "sk-other")
    stub.reset(lambda body, n: (200, reply(1)))
    graded(stub, SCORE, ["a"], term={"api_key_env": "MY_GRADER_KEY"})
    assert stub.requests[0]["headers"]["Authorization"] == "Bearer sk-other"


@pytest.mark.timeout(60)
def test_cosine_asks_the_embeddings_endpoint(stub):
    vectors = {"Paris": [1.0, 0.0], "paris, france": [0.6, 0.8], "Lyon": [0.0, 1.0]}

    def embed(body, n):
        data = [
            {"index": i, "embedding": vectors[t], "object": "embedding"} for i, t in enumerate(body["input"])
        ]
        return 200, "raw:" + json.dumps({"object": "list", "data": data, "model": body["model"]})

    stub.reset(embed)
    spec = {
        "type": "text_similarity",
        "name": "c",
        "input": OUT,
        "reference": REF,
        "evaluation_metric": "cosine",
        "pass_threshold": 0.5,
    }
    res = graded(stub, spec, ["Paris", "paris, france", "Lyon"])
    assert [row["c"] for row in res.rewards] == pytest.approx([1.0, 0.6, 0.0])
    assert [e["c"]["passed"] for e in res.extra] == [1.0, 1.0, 0.0]
    assert stub.requests[0]["body"]["model"] == "text-embedding-3-large"


@pytest.mark.timeout(60)
def test_a_multi_grader_with_a_model_sub_grader_runs_as_model_grader(stub):
    stub.reset(lambda body, n: (200, reply(0.5)))
    spec = {
        "type": "multi",
        "calculate_output": "0.5 * judge + 0.5 * exact",
        "graders": {
            "judge": SCORE,
            "exact": {"type": "string_check", "name": "e", "input": OUT, "reference": REF, "operation": "eq"},
        },
    }
    res = graded(stub, spec, ["Paris", "Rome"], term={"alias": "m"})
    assert res.scores == [0.75, 0.25]
    assert res.extra == [{"m": {"judge": 0.5, "exact": 1.0}}, {"m": {"judge": 0.5, "exact": 0.0}}]
