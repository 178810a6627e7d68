"""Graders (issue 46): the real grader files public docs show, ``rewardhub grader validate/run``, the RFT
job file, the config shorthand, and the python grader's sandbox limits with their flags."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from rewardhub.cli import main
from rewardhub.graders import grader_problems
from rewardhub.graders import read_grader_file
from rewardhub.graders import run_answer

DATA = Path(__file__).parent / "data" / "graders"
VALID = sorted((DATA / "valid").glob("*.json"))
INVALID = json.loads((DATA / "invalid" / "expected_fields.json").read_text())


def test_the_collection_holds_the_files_the_docs_show():
    assert len(VALID) >= 17 and len(INVALID) >= 2
    kinds = {read_grader_file(str(p))["type"] for p in VALID}
    assert kinds == {"string_check", "text_similarity", "score_model", "label_model", "python", "multi"}


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.name)
def test_every_valid_real_grader_validates(path):
    assert grader_problems(read_grader_file(str(path))) == []


@pytest.mark.parametrize("name", sorted(INVALID))
def test_every_invalid_real_grader_is_refused_with_the_right_fields(name):
    problems = grader_problems(read_grader_file(str(DATA / "invalid" / name)))
    assert sorted({p.split(":")[0] for p in problems}) == sorted(INVALID[name]), problems


def test_validate_prints_one_line_per_problem_and_exits_1(capsys):
    bad = str(DATA / "invalid" / "course_multi_contains.json")
    good = str(VALID[0])
    assert main(["grader", "validate", good, bad]) == 1
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == f"{good}: ok"
    assert [ln.split(": ")[1] for ln in lines[1:]] == INVALID["course_multi_contains.json"]
    assert main(["grader", "validate", good]) == 0


def test_run_prints_the_answer_of_graders_run(tmp_path, capsys):
    item = tmp_path / "item.json"
    item.write_text(json.dumps({"name": "John Doe", "email": "john.doe@gmail.com"}))
    sample = tmp_path / "sample.json"
    sample.write_text(
        json.dumps({"output_text": json.dumps({"name": "Jon Doe", "email": "john.doe@gmail.com"})})
    )
    assert (
        main(
            [
                "grader",
                "run",
                str(DATA / "valid" / "guide_multi_name_email.json"),
                "--item",
                str(item),
                "--sample",
                str(sample),
            ]
        )
        == 0
    )
    got = json.loads(capsys.readouterr().out)
    assert got["sub_rewards"]["email"] == 1.0 and 0.8 < got["sub_rewards"]["name"] < 1.0
    assert got["reward"] == pytest.approx((got["sub_rewards"]["name"] + 1.0) / 2)
    assert not any(v for k, v in got["metadata"]["errors"].items() if not k.endswith(("_details", "_type")))
    # a sample that is not JSON: the guide's grader reads output_json, so the flag, exit 1
    assert (
        main(
            [
                "grader",
                "run",
                str(DATA / "valid" / "guide_multi_name_email.json"),
                "--item",
                str(item),
                "--sample",
                '"John Doe"',
            ]
        )
        == 1
    )
    got = json.loads(capsys.readouterr().out)
    assert got["reward"] == 0.0 and got["metadata"]["errors"]["sample_parse_error"] is True


def test_a_tool_call_grader_reads_a_trajectorys_tool_calls_through_score():
    from rewardhub.execution import Runner

    call = {
        "id": "c",
        "type": "function",
        "function": {"name": "get_acceptors", "arguments": '{"smiles": "CCO"}'},
    }
    rows = [
        {
            "messages": [
                {"role": "user", "content": "acceptors of CCO?"},
                {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "content": "2"},
                {"role": "assistant", "content": "two"},
            ],
            "extra_info": {"smiles": smiles},
        }
        for smiles in ("CCO", "CCN")
    ]
    with Runner.from_config(
        {"rewards": [{"grader": str(DATA / "valid" / "guide_tool_call_multi.json")}]}
    ) as r:
        res = r.score(rows)
    assert res.scores == [1.0, 0.5]
    assert res.extra[1]["guide_tool_call_multi"] == {"function_name": 1.0, "arguments": 0.0}


def test_an_rft_job_file_and_a_graders_run_body_are_read_for_their_grader():
    job = read_grader_file(str(DATA / "valid" / "cookbook_rft_job.json"))
    assert job["name"] == "gpt41_score_model_2"
    assert read_grader_file(str(DATA / "valid" / "api_run_request.json"))["type"] == "score_model"


def test_the_term_shorthand_reads_a_file_next_to_the_config(tmp_path, monkeypatch):
    from rewardhub.config.loader import load_plan
    from rewardhub.execution import Runner

    (tmp_path / "g").mkdir()
    (tmp_path / "g" / "exact.json").write_text(
        json.dumps(
            {
                "type": "string_check",
                "name": "exact",
                "input": "{{ sample.output_text }}",
                "reference": "{{ item.answer }}",
                "operation": "eq",
            }
        )
    )
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(
        "reward:\n  rewards:\n    - {grader: g/exact.json, weight: 2}\n"
        "    - grader: {type: string_check, input: '{{ sample.output_text }}', reference: a, "
        "operation: ilike}\n      alias: has_a\n"
    )
    monkeypatch.chdir(tmp_path / "g")  # the file is found relative to the config, not the working directory
    plan = load_plan(str(cfg))
    terms = [(t.name, t.alias, t.weight) for t in plan.reward.rewards]
    assert terms == [("grader", "exact", 2.0), ("grader", "has_a", 1.0)]
    with Runner.from_config(plan.reward) as runner:
        res = runner.score([{"response": "A", "extra_info": {"answer": "A"}}])
    assert res.rewards[0] == {"exact": 1.0, "has_a": 1.0} and res.scores == [3.0]


def test_a_grader_term_refuses_a_name_and_a_bad_grader_before_running():
    from rewardhub.errors import UsageError
    from rewardhub.execution import Runner

    with pytest.raises(UsageError, match="alias"):
        Runner.from_config(
            {"rewards": [{"grader": {"type": "python", "source": "def grade(s, i): return 1"}, "name": "x"}]}
        )
    with pytest.raises(UsageError, match=r"reward.rewards\[0\].grader is not a valid grader"):
        Runner.from_config({"rewards": [{"grader": {"type": "python", "source": "x = 1"}}]})


# ---- the python grader in rewardhub-code's sandbox -------------------------------------------------

pytest.importorskip("rewardhub_code")


def _python(src: str, **limits):
    from rewardhub.graders import GraderError
    from rewardhub.graders import compile_grader
    from rewardhub.graders import run_python_grader
    from rewardhub.graders import sample_scope

    grader = compile_grader({"type": "python", "name": "p", "source": src})
    try:
        return run_python_grader(
            grader.spec, sample_scope(response="hello", extra_info={"want": "hello"}), limits or None
        )
    except GraderError as exc:
        return exc.flag, str(exc)


@pytest.mark.timeout(120)
def test_a_python_grader_runs_grade_on_the_sample_and_item():
    assert _python("def grade(sample, item):\n    return float(sample['output_text'] == item['want'])") == 1.0


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "src, limits, why",
    [
        (
            "import socket\ndef grade(s, i):\n"
            "    socket.create_connection(('1.1.1.1', 53), timeout=5)\n    return 1.0",
            {},
            "Error",
        ),
        ("def grade(s, i):\n    while True:\n        pass", {"timeout_s": 3}, "past the 3 s limit"),
        ("def grade(s, i):\n    x = bytearray(3 << 30)\n    return 1.0", {}, "MemoryError|memory limit"),
        ("def grade(s, i):\n    raise ValueError('nope')", {}, "ValueError: nope"),
        ("def grade(s, i):\n    return 'high'", {}, "returned 'high'"),
    ],
)
def test_each_python_grader_limit_is_enforced_with_its_flag(src, limits, why):
    flag, message = _python(src, **limits)
    assert flag == "python_grader_runtime_error"
    assert re.search(why, message), message


def test_the_documented_python_grader_limits():
    from rewardhub.graders import PYTHON_LIMITS

    assert PYTHON_LIMITS == {"timeout_s": 120.0, "memory_mb": 2048, "disk_mb": 1024, "cpus": 2}
    big = {"type": "python", "source": "def grade(s, i):\n    return 1.0\n" + "#" * (256 * 1024)}
    assert [p.split(":")[0] for p in grader_problems(big)] == ["source"]


def test_run_answer_reports_a_python_grader_failure_as_its_flag():
    got = run_answer(
        {"type": "python", "source": "def grade(s, i):\n    return 1 / 0"}, {}, {"output_text": "x"}
    )
    assert got["reward"] == 0.0 and got["metadata"]["errors"]["python_grader_runtime_error"] is True
    assert "ZeroDivisionError" in got["metadata"]["errors"]["python_grader_runtime_error_details"]
