"""OpenAI RFT graders as rewards (issue 46): the deterministic types against a reference written from
OpenAI's graders guide, the safe formula evaluator, templating, validation, and error flags as error kinds."""

from __future__ import annotations

import json
import math
import random

import pytest

from rewardhub.errors import UsageError
from rewardhub.execution import Runner
from rewardhub.graders import FLAGS
from rewardhub.graders import GraderError
from rewardhub.graders import compile_grader
from rewardhub.graders import grader_problems
from rewardhub.graders import run_answer
from rewardhub.graders import sample_scope

OUT = "{{ sample.output_text }}"
REF = "{{ item.answer }}"


# ---- a reference written from the guide's words, not from the code under test --------------------


def ref_string_check(op: str, text: str, reference: str) -> float:
    # guide: eq / ne compare (case-sensitive); like: input contains reference; ilike: ignoring case
    return float(
        {
            "eq": text == reference,
            "ne": text != reference,
            "neq": text != reference,
            "like": reference in text,
            "ilike": reference.lower() in text.lower(),
        }[op]
    )


def ref_fuzzy(text: str, reference: str) -> float:
    # guide: rapidfuzz's WRatio with its default processor, scaled to [0, 1]
    from rapidfuzz import fuzz
    from rapidfuzz import utils

    return fuzz.WRatio(text, reference, processor=utils.default_process) / 100.0


def _pairs(n: int, seed: int = 46) -> list[tuple[str, str]]:
    rnd = random.Random(seed)
    words = ["Paris", "paris", "PARIS", "42", "forty-two", "the", "answer", "is", "", " ", "é", "Ünïcode"]
    out = []
    for _ in range(n):
        ref = " ".join(rnd.choice(words) for _ in range(rnd.randint(0, 3)))
        kind = rnd.random()
        if kind < 0.25:
            text = ref
        elif kind < 0.5:
            text = rnd.choice(["", "so ", "x"]) + ref.upper() + rnd.choice(["", ".", " ok"])
        else:
            text = " ".join(rnd.choice(words) for _ in range(rnd.randint(0, 4)))
        out.append((text, ref))
    return out


@pytest.mark.timeout(300)
def test_deterministic_graders_agree_with_the_documented_semantics_on_10k_pairs():
    pairs = _pairs(10_000)
    spec = {
        "type": "multi",
        "calculate_output": "0.25 * (eq + ne) + 0.5 * max(like, ilike) - fuzzy ^ 2",
        "graders": {
            op: {"type": "string_check", "name": op, "input": OUT, "reference": REF, "operation": op}
            for op in ("eq", "ne", "like", "ilike")
        },
    }
    spec["graders"]["fuzzy"] = {
        "type": "text_similarity",
        "name": "fuzzy",
        "input": OUT,
        "reference": REF,
        "evaluation_metric": "fuzzy_match",
        "pass_threshold": 0.5,
    }
    rows = [{"response": t, "extra_info": {"answer": r}} for t, r in pairs]
    with Runner.from_config({"rewards": [{"grader": spec, "alias": "m"}]}) as runner:
        res = runner.score(rows)
    mismatches = []
    for (text, ref), score, extra in zip(pairs, res.scores, res.extra):
        subs = {op: ref_string_check(op, text, ref) for op in ("eq", "ne", "like", "ilike")}
        subs["fuzzy"] = ref_fuzzy(text, ref)
        want = 0.25 * (subs["eq"] + subs["ne"]) + 0.5 * max(subs["like"], subs["ilike"]) - subs["fuzzy"] ** 2
        if not (math.isclose(score, want, abs_tol=1e-12) and extra["m"] == {**extra["m"], **subs}):
            mismatches.append((text, ref, score, want))
    assert mismatches == []
    assert len({s for s in res.scores}) > 20  # the pairs reach many different values


def test_neq_is_accepted_as_the_guide_spells_it():
    g = compile_grader(
        {"type": "string_check", "name": "n", "input": OUT, "reference": "a", "operation": "neq"}
    )
    assert g.grade(sample_scope(response="b"))[0] == 1.0
    assert g.grade(sample_scope(response="a"))[0] == 0.0


@pytest.mark.parametrize("metric", ["bleu", "gleu", "rouge_1", "rouge_2", "rouge_l"])
def test_text_similarity_metrics_come_from_their_libraries(metric):
    from nltk.translate.bleu_score import sentence_bleu
    from nltk.translate.gleu_score import sentence_gleu
    from rouge_score.rouge_scorer import RougeScorer

    text, ref = "the cat sat on the mat today", "the cat sat on the mat"
    want = {
        "bleu": lambda: sentence_bleu([ref.split()], text.split()),
        "gleu": lambda: sentence_gleu([ref.split()], text.split()),
        "rouge_1": lambda: RougeScorer(["rouge1"], use_stemmer=True).score(ref, text)["rouge1"].fmeasure,
        "rouge_2": lambda: RougeScorer(["rouge2"], use_stemmer=True).score(ref, text)["rouge2"].fmeasure,
        "rouge_l": lambda: RougeScorer(["rougeL"], use_stemmer=True).score(ref, text)["rougeL"].fmeasure,
    }
    spec = {
        "type": "text_similarity",
        "name": "t",
        "input": OUT,
        "reference": "{{ item.ref }}",
        "evaluation_metric": metric,
        "pass_threshold": 0.5,
    }
    got = run_answer(spec, {"ref": ref}, {"output_text": text})
    assert got["reward"] == pytest.approx(want[metric]()) and 0 < got["reward"] < 1


# ---- the formula: a parser of its own, never eval ------------------------------------------------


@pytest.mark.parametrize(
    "formula, want",
    [
        ("a + b * 2", 0.5 + 0.25 * 2),
        ("(a + b) / 2", 0.375),
        ("2 ^ 3 ^ 2", 512.0),
        ("-a ^ 2", -0.25),
        ("min(a, b, 1) + max(a, b)", 0.75),
        ("abs(b - a) + floor(2.7) + ceil(0.1)", 3.25),
        ("exp(0) + sqrt(4) + log(1)", 3.0),
        ("1e-1 * 10 + .5", 1.5),
    ],
)
def test_calculate_output_computes_the_documented_operators(formula, want):
    spec = {
        "type": "multi",
        "calculate_output": formula,
        "graders": {
            n: {"type": "string_check", "name": n, "input": OUT, "reference": "x", "operation": "eq"}
            for n in "ab"
        },
    }
    assert compile_grader(spec).formula({"a": 0.5, "b": 0.25}) == pytest.approx(want)


@pytest.mark.parametrize(
    "formula",
    [
        "__import__('os').system('true')",
        "a.__class__",
        "a if b else 1",
        "[a]",
        "a; b",
        "open('x')",
        "lambda: 1",
        "a ** ",
        "min()",
        "a b",
    ],
)
def test_calculate_output_that_is_not_the_grammar_is_refused_before_running(formula):
    spec = {
        "type": "multi",
        "calculate_output": formula,
        "graders": {
            n: {"type": "string_check", "name": n, "input": OUT, "reference": "x", "operation": "eq"}
            for n in "ab"
        },
    }
    problems = grader_problems(spec)
    assert problems and all(p.startswith("calculate_output") for p in problems), problems


def test_a_formula_that_cannot_be_computed_fails_with_its_flag():
    spec = {
        "type": "multi",
        "calculate_output": "1 / a",
        "graders": {
            "a": {"type": "string_check", "name": "a", "input": OUT, "reference": "x", "operation": "eq"}
        },
    }
    got = run_answer(spec, {}, {"output_text": "y"})
    assert got["reward"] == 0.0 and got["metadata"]["errors"]["formula_parse_error"] is True
    assert [k for k in FLAGS if got["metadata"]["errors"][k]] == ["formula_parse_error"]


# ---- templating ----------------------------------------------------------------------------------


def test_templates_read_json_paths_of_item_and_sample_and_a_trajectorys_tool_calls():
    messages = [
        {"role": "user", "content": "weather?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "content": "sunny"},
        {"role": "assistant", "content": '{"city": ["Oslo"]}'},
    ]
    scope = sample_scope(
        response='{"city": ["Oslo"]}',
        messages=messages,
        extra_info={"want": {"tool": "get_weather"}},
        ground_truth={"city": "Oslo"},
    )
    g = compile_grader(
        {
            "type": "string_check",
            "name": "t",
            "operation": "eq",
            "input": "{{ sample.output_tools[0].function.name }}/{{sample.output_json.city[0]}}",
            "reference": "{{ item.want.tool }}/{{ item.city }}",
        }
    )
    assert g.grade(scope)[0] == 1.0


@pytest.mark.parametrize(
    "template, flag",
    [
        ("{{ item.nope }}", "invalid_variable_error"),
        ("{{ sample.output_json.a }}", "sample_parse_error"),
        ("{{ sample.output_tools[3] }}", "invalid_variable_error"),
    ],
)
def test_a_template_that_cannot_be_filled_fails_with_its_flag(template, flag):
    spec = {"type": "string_check", "name": "t", "input": template, "reference": "x", "operation": "eq"}
    got = run_answer(spec, {"answer": "a"}, {"output_text": "not json"})
    assert [k for k, v in got["metadata"]["errors"].items() if v] == [flag]


# ---- validation: refused before anything runs, naming the field -----------------------------------


@pytest.mark.parametrize(
    "spec, field",
    [
        (
            {"type": "string_check", "name": "x", "input": OUT, "reference": REF, "operation": "contains"},
            "operation",
        ),
        (
            {
                "type": "string_check",
                "name": "x",
                "input": "{{ foo.bar }}",
                "reference": REF,
                "operation": "eq",
            },
            "input",
        ),
        (
            {
                "type": "text_similarity",
                "name": "x",
                "input": OUT,
                "reference": REF,
                "evaluation_metric": "bert",
            },
            "evaluation_metric",
        ),
        (
            {
                "type": "score_model",
                "name": "x",
                "model": "m",
                "input": [{"role": "user", "content": OUT}],
                "range": [1, 0],
            },
            "range",
        ),
        (
            {
                "type": "label_model",
                "name": "x",
                "model": "m",
                "input": [{"role": "user", "content": OUT}],
                "labels": ["a"],
                "passing_labels": ["b"],
            },
            "passing_labels",
        ),
        (
            {"type": "python", "name": "x", "source": "def grade(s, i):\n  return 1\n" + "#" * 262_144},
            "source",
        ),
        ({"type": "python", "name": "x", "source": "def nope(): pass"}, "source"),
        (
            {"type": "multi", "graders": {"a": {"type": "string_check"}}, "calculate_output": "a"},
            "graders.a.input",
        ),
        (
            {
                "type": "multi",
                "graders": {"a": {"type": "string_check", "input": OUT, "reference": REF, "operation": "eq"}},
                "calculate_output": "a + b",
            },
            "calculate_output",
        ),
        ({"type": "string_compare"}, "type"),
        (
            {
                "type": "string_check",
                "name": "x",
                "input": OUT,
                "reference": REF,
                "operation": "eq",
                "opration": 1,
            },
            "opration",
        ),
    ],
)
def test_an_invalid_grader_is_refused_naming_the_field(spec, field):
    problems = grader_problems(spec)
    assert any(p.startswith(field + ":") for p in problems), problems
    with pytest.raises(UsageError, match="not a valid grader"):
        Runner.from_config({"rewards": [{"grader": spec}]})


# ---- failures keep their names --------------------------------------------------------------------


def test_a_grader_failure_is_its_flag_as_the_rows_error_kind_never_a_number():
    bad = {
        "type": "string_check",
        "name": "j",
        "input": "{{ sample.output_json.x }}",
        "reference": "1",
        "operation": "eq",
    }
    rows = [{"response": '{"x": "1"}'}, {"response": "plain"}]
    with Runner.from_config({"rewards": [{"grader": bad}]}) as runner:
        res = runner.score(rows)
    assert res.rewards[0] == {"j": 1.0} and res.errors[0] == {}
    assert res.rewards[1]["j"] is None or math.isnan(res.rewards[1]["j"])
    assert res.error_kinds[1] == {"j": "sample_parse_error"}
    # on_failure: zero gives the hosted runner's 0, and the flag stays in the row
    with Runner.from_config({"rewards": [{"grader": bad, "on_failure": "zero"}]}) as runner:
        res = runner.score(rows)
    assert res.rewards[1] == {"j": 0.0} and res.error_kinds[1] == {"j": "sample_parse_error"}


def test_every_flag_of_the_spec_is_a_grader_error_kind():
    for flag in FLAGS:
        assert GraderError(flag, "x").kind == flag
    with pytest.raises(ValueError):
        GraderError("made_up_error", "x")


def test_run_answer_has_the_shape_of_openais_graders_run():
    spec = {"type": "string_check", "name": "s", "input": OUT, "reference": REF, "operation": "eq"}
    got = run_answer(spec, {"answer": "a"}, {"output_text": "a"})
    assert set(got) == {"reward", "sub_rewards", "metadata", "model_grader_token_usage_per_model"}
    details = {"python_grader_server_error_type", "python_grader_runtime_error_details",
               "model_grader_server_error_details"}
    assert got["reward"] == 1.0 and set(got["metadata"]["errors"]) == set(FLAGS) | details
    assert json.loads(json.dumps(got)) == got
