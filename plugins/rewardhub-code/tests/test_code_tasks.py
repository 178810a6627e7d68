"""Twenty real tasks: correct programs score 1.0, wrong ones 0.0 (all-or-nothing) and below 1.0 (fraction)."""

from __future__ import annotations

import pytest
from code_tasks import TASKS
from code_tasks import fenced
from rewardhub_code.reward import code_io
from rewardhub_code.reward import code_tests

IDS = [t[0] for t in TASKS]


def test_there_are_twenty_tasks_of_both_kinds():
    io = [t for t in TASKS if t[0].endswith("_io")]
    assert len(TASKS) == 20 and len(io) == 6


@pytest.mark.parametrize(("name", "gt", "good", "bad"), TASKS, ids=IDS)
def test_correct_scores_one_and_wrong_scores_zero(name, gt, good, bad):
    right = code_tests(response=fenced(good), ground_truth=gt)
    assert right["score"] == 1.0, right
    assert right["failed"] == 0 and right["error"] == "" and right["passed"] == right["total"]
    wrong = code_tests(response=fenced(bad), ground_truth=gt, all_or_nothing=True)
    assert wrong["score"] == 0.0 and wrong["failed"] >= 1, wrong  # so the fraction is below 1.0 too


@pytest.mark.parametrize(("name", "gt", "good", "bad"), [t for t in TASKS if t[0].endswith("_io")],
                         ids=[t[0] for t in TASKS if t[0].endswith("_io")])
def test_code_io_agrees_on_stdin_stdout_tasks(name, gt, good, bad):
    assert code_io(response=fenced(good), ground_truth=gt)["score"] == 1.0
    assert code_io(response=fenced(bad), ground_truth=gt, all_or_nothing=True)["score"] == 0.0


def test_fraction_of_tests_passed():
    out = code_tests(response=fenced("def add(a, b):\n    return abs(a) + b"),
                     ground_truth=["assert add(1, 2) == 3", "assert add(-1, 1) == 0", "assert add(0, 5) == 5",
                                   "assert add(-2, -2) == -4"])
    assert out == {
        "score": 0.5,
        "passed": 2,
        "failed": 2,
        "total": 4,
        "timed_out": 0,
        "error": "wrong_answer",
        "backend": "local",
    }


def test_a_test_that_hangs_keeps_the_earlier_passes():
    gt = ["assert f(1) == 1", "assert f(2) == 2", "assert f(-1) == -1"]
    prog = "def f(x):\n    while x < 0:\n        pass\n    return x"
    out = code_tests(response=fenced(prog), ground_truth=gt, timeout_s=1.0)
    assert out["passed"] == 2 and out["failed"] == 1 and out["timed_out"] == 1 and out["error"] == "timeout"
    assert out["score"] == pytest.approx(2 / 3)


def test_error_kinds():
    gt = ["assert f() == 1"]
    assert code_tests(response="no code here", ground_truth=gt)["error"] == "no_code"
    assert code_tests(response=fenced("def f(:\n  pass"), ground_truth=gt)["error"] == "syntax_error"
    assert (
        code_tests(response=fenced("def f():\n    return 1 / 0"), ground_truth=gt)["error"] == "runtime_error"
    )
    assert (
        code_tests(response=fenced("import nonexistent_mod_xyz"), ground_truth=gt)["error"] == "runtime_error"
    )
    assert code_tests(response=fenced("def f():\n    return 2"), ground_truth=gt)["error"] == "wrong_answer"
    io = {"inputs": ["1\n"], "outputs": ["1\n"]}
    assert code_io(response=fenced("print(2)"), ground_truth=io)["error"] == "wrong_answer"
    assert code_io(response=fenced("print(("), ground_truth=io)["error"] == "syntax_error"
    assert code_io(response=fenced("raise SystemExit(3)"), ground_truth=io)["error"] == "runtime_error"


def test_sys_exit_in_the_program_does_not_pass_the_tests():
    out = code_tests(response=fenced("import sys\nsys.exit(0)"), ground_truth=["assert False"])
    assert out["score"] == 0.0 and out["error"] == "runtime_error"


def test_unfenced_response_only_when_allowed():
    gt = ["assert add(1, 1) == 2"]
    raw = "def add(a, b):\n    return a + b\n"
    assert code_tests(response=raw, ground_truth=gt)["error"] == "no_code"
    assert code_tests(response=raw, ground_truth=gt, allow_unfenced=True)["score"] == 1.0
