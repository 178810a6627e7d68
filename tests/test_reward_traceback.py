"""Authors see where their reward failed (the last frames of its own code), and ``score`` fails a run
in which a reward's calls failed above ``--max-error-rate`` (default: a reward whose every call failed)."""

from __future__ import annotations

import json
import textwrap

import pytest

from rewardhub.execution import Column
from rewardhub.execution import Outcome

BAD = textwrap.dedent('''
    def compute_score(response, ground_truth, **kw):
        return helper(response)

    def helper(response):
        if response == "ok":
            return 1.0
        return 1 / 0.0
''')

FRAMES = ['  File "{path}", line 3, in compute_score', "    return helper(response)",
          '  File "{path}", line 8, in helper', "    return 1 / 0.0"]


def _setup(tmp_path, responses, extra=""):
    bad = tmp_path / "bad.py"
    bad.write_text(BAD)
    (tmp_path / "rows.jsonl").write_text(
        "".join(json.dumps({"response": r, "ground_truth": "x"}) + "\n" for r in responses))
    (tmp_path / "c.yaml").write_text(f"reward:\n  rewards:\n    - path: bad.py\n{extra}")
    frames = "\n".join(line.format(path=bad) for line in FRAMES)
    return str(tmp_path / "c.yaml"), str(tmp_path / "rows.jsonl"), frames


@pytest.mark.parametrize("executor", ["inline", "thread", "process"])
def test_summary_json_names_the_rewards_own_frames_and_every_call_failing_exits_1(cli, tmp_path, executor):
    cfg, rows, frames = _setup(tmp_path, ["a", "b"], f"      executor: {executor}\n")
    res = cli("score", cfg, rows, "-o", str(tmp_path / "out.jsonl"),
              "--summary-json", str(tmp_path / "s.json"))
    assert res.returncode == 1, res.stderr
    errors = [line for line in res.stderr.splitlines() if line.startswith("ERROR")]
    assert errors == ["ERROR: reward 'compute_score' failed on 2 of 2 rows (2 errors, 0 timeouts; every call "
                      "failed); first: reward 'compute_score' on row 1: ZeroDivisionError: float "
                      "division by zero"]
    assert "File " not in res.stderr  # the frames are for --debug
    first = json.loads((tmp_path / "s.json").read_text())["failures"]["compute_score"]
    assert first["errors"] == 2 and first["rows"] == 2 and first["error_rate"] == 1.0
    assert first["first"]["traceback"] == frames  # no rewardhub frame among them
    # the rows are written as before: the message, without the frames
    out = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert out[0]["errors"] == {"compute_score": "reward 'compute_score' on row 1: ZeroDivisionError: "
                                                 "float division by zero"}


def test_max_error_rate(cli, tmp_path):
    cfg, rows, _ = _setup(tmp_path, ["ok", "ok", "ok", "bad"])
    res = cli("score", cfg, rows)
    assert res.returncode == 0 and "ERROR" not in res.stderr  # 1 of 4: under the default
    res = cli("score", cfg, rows, "--max-error-rate", "0.25")
    assert res.returncode == 0, res.stderr  # 0.25 is not above 0.25
    res = cli("score", cfg, rows, "--max-error-rate", "0.2")
    assert res.returncode == 1
    assert [line for line in res.stderr.splitlines() if line.startswith("ERROR")] == [
        "ERROR: reward 'compute_score' failed on 1 of 4 rows (1 errors, 0 timeouts; above --max-error-rate "
        "0.2); first: reward 'compute_score' on row 4: ZeroDivisionError: float division by zero"]
    res = cli("score", cfg, rows, "--max-error-rate", "2")
    assert res.returncode == 2 and "give a share from 0 to 1" in res.stderr


def test_a_failure_rate_above_the_warning_threshold_is_a_warning_line(cli, tmp_path):
    """16 of 20 calls failed: exit 0 (under --max-error-rate's default) but one WARNING: line naming the
    reward and the rate; the threshold is settable, and at or under it nothing is said."""
    cfg, rows, _ = _setup(tmp_path, ["ok"] * 4 + ["bad"] * 16)
    res = cli("score", cfg, rows)
    assert res.returncode == 0, res.stderr
    warned = [line for line in res.stderr.splitlines() if line.startswith("WARNING")]
    assert warned == ["WARNING: reward 'compute_score' failed on 16 of 20 rows (80%; 16 errors, 0 timeouts), "
                      "above --warn-error-rate 0.1: those rows have no score from it; first: reward "
                      "'compute_score' on row 5: ZeroDivisionError: float division by zero"]
    res = cli("score", cfg, rows, "--warn-error-rate", "0.8")
    assert res.returncode == 0 and "WARNING" not in res.stderr, res.stderr
    res = cli("score", cfg, rows, "--max-error-rate", "0.5")  # an ERROR: line, and no WARNING beside it
    assert res.returncode == 1 and "WARNING" not in res.stderr
    assert "ERROR: reward 'compute_score'" in res.stderr
    cfg, rows, _ = _setup(tmp_path, ["ok"] * 10 + ["bad"])  # 1 of 11: under 10 %
    assert "WARNING" not in cli("score", cfg, rows).stderr
    for bad in ("nan", "1.5"):
        res = cli("score", cfg, rows, "--warn-error-rate", bad)
        assert res.returncode == 2 and "--warn-error-rate" in res.stderr and "give a share" in res.stderr


@pytest.mark.parametrize("executor", ["inline", "process"])
def test_on_failure_raise_shows_frames_with_debug(cli, tmp_path, executor):
    cfg, rows, frames = _setup(tmp_path, ["a"], f"      executor: {executor}\n      on_failure: raise\n")
    res = cli("score", cfg, rows)
    assert res.returncode == 1
    assert "ZeroDivisionError: float division by zero" in res.stderr and "File " not in res.stderr
    assert "--debug or REWARDHUB_DEBUG=1 shows where" in res.stderr
    for how in (("--debug",), ()):
        res = cli("score", cfg, rows, *how, env={} if how else {"REWARDHUB_DEBUG": "1"})
        assert res.returncode == 1
        assert f"where the reward failed (most recent call last):\n{frames}\n" in res.stderr


def test_debug_prints_each_failing_rewards_first_frames(cli, tmp_path):
    cfg, rows, frames = _setup(tmp_path, ["ok", "bad"])
    res = cli("score", cfg, rows, "--debug")
    assert res.returncode == 0, res.stderr
    assert ("DEBUG: reward 'compute_score': 1 errors, 0 timeouts in 2 rows; first, on row 2: reward "
            "'compute_score' on row 2: ZeroDivisionError: float division by zero\n"
            f"where the reward failed (most recent call last):\n{frames}\n") in res.stderr


def test_rewardhub_test_shows_the_frames(cli, tmp_path):
    cfg, _, frames = _setup(tmp_path, [])
    res = cli("test", cfg, "--executors", "inline,process", "--json")
    assert res.returncode == 1
    check = next(c for c in json.loads(res.stdout) if c["contract"] == "returns a score")
    assert check["status"] == "FAIL" and check["where"] == frames
    res = cli("test", cfg, "--executors", "inline")
    assert f"compute_score / returns a score: where the reward failed (most recent call last):\n{frames}" \
        in res.stdout


def test_frames_cross_the_wire_as_text():
    """Ray reward workers send outcomes in wire form: the frames come back with them."""
    col = Column(1)
    col.fail(0, "error", "ZeroDivisionError: x\n--- where the reward failed (most recent call last) ---\n"
                         '  File "r.py", line 1, in f', 0.0)
    wire = col.outcomes()[0].to_wire()
    assert all(isinstance(v, (str, int, float, dict, type(None))) for v in wire)
    back = Column.from_outcomes([Outcome.from_wire(wire)])
    assert back.errors == {0: "ZeroDivisionError: x"} and back.where == {0: '  File "r.py", line 1, in f'}


@pytest.mark.ray
def test_frames_come_back_from_ray_reward_workers(cli, tmp_path):
    pytest.importorskip("ray")
    cfg, rows, _ = _setup(tmp_path, ["a"], "      executor: ray\n")
    res = cli("score", cfg, rows, "--summary-json", str(tmp_path / "s.json"), timeout=300)
    assert res.returncode == 1, res.stderr
    where = json.loads((tmp_path / "s.json").read_text())["failures"]["compute_score"]["first"]["traceback"]
    # the worker runs its own copy of the file: the same name, lines and functions
    assert where.splitlines()[1:] == ["    return helper(response)", where.splitlines()[2],
                                      "    return 1 / 0.0"]
    assert where.splitlines()[2].endswith('bad.py", line 8, in helper')


def test_a_deep_failure_keeps_the_rewards_entry_frame():
    from rewardhub.execution._outcome import error_text
    from rewardhub.execution._where import split_error

    def deep(k):
        return 1 / 0 if k == 0 else deep(k - 1)

    def compute_score(**kw):
        return deep(8)

    try:
        compute_score()
    except ZeroDivisionError as exc:
        message, where = split_error(error_text(exc))
    assert message == "ZeroDivisionError: division by zero"
    lines = where.splitlines()
    assert lines[0].endswith(", in test_a_deep_failure_keeps_the_rewards_entry_frame")  # the caller's own
    assert lines[2] == "  ... (6 frames left out)"  # 11 frames, 5 shown
    assert lines[-1] == "    return 1 / 0 if k == 0 else deep(k - 1)"
