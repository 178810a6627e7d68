"""Failing rewards never train silently: a failed call is an invalid sample (not a 0.0), its rate is
counted per reward, and a reward that keeps failing (raising, returning NaN or a string, hanging)
stops the run with one line naming it and its last error.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest

from rewardhub_trainer.cli import train
from rewardhub_trainer.faults import RunAborted

pytestmark = pytest.mark.ray

SPS = 8  # samples per step in tiny_config: 2 prompts x 4 responses

#: the kind of failure depends on the response (crc32 % 4): raise, NaN, a string, a hang
ALWAYS_FAILS = '''
import time
import zlib

def flaky(*, response, **kwargs):
    kind = zlib.crc32(response.encode()) % 4
    if kind == 0:
        raise ValueError("no answer found")
    if kind == 1:
        return float("nan")
    if kind == 2:
        return "yes"
    time.sleep(3600)
'''

#: about half the calls raise; the others score 1.0
HALF_FAILS = '''
import zlib

def half(*, response, **kwargs):
    if zlib.crc32(response.encode()) % 2:
        raise ValueError("odd response")
    return 1.0
'''


def _rows(out: Path) -> list[dict]:
    path = out / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _reward(tmp_path: Path, text: str, function: str, **term) -> dict:
    path = tmp_path / f"{function}.py"
    path.write_text(text)
    return {"rewards": [{"path": str(path), "function": function, **term}]}


@pytest.mark.timeout(300)
def test_a_reward_that_always_fails_stops_the_run_naming_it(ray_session, tiny_config, tmp_path):
    """Raising, NaN, a string and a hang (timed out by trainer.reward_timeout_s) are all failures:
    3 steps in a row above trainer.max_reward_error_rate stop the run with one line."""
    cfg = tiny_config(trainer={"total_steps": 8, "reward_timeout_s": 2},
                      reward=_reward(tmp_path, ALWAYS_FAILS, "flaky"))
    out = tmp_path / "o"
    t0 = time.monotonic()
    with pytest.raises(RunAborted) as info:
        train(cfg, output=str(out))
    assert time.monotonic() - t0 < 240
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith("reward 'flaky': 100% of its calls failed, above trainer.max_reward_error_rate=0.5 "
                          "in 3 steps in a row; last error: reward 'flaky' on sample "), msg
    assert any(
        e in msg
        for e in ("ValueError: no answer found", "returned nan", "returned 'yes'", "timed out after 2s")
    )
    rows = _rows(out)
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:  # every sample invalid (NaN), none scored 0.0
        assert r["rewards/flaky/error_rate"] == 1.0 and r["samples/invalid"] == SPS
        assert r["reward/nan"] == SPS and math.isnan(r["reward/mean"])
    assert not (out / "summary.json").exists()


@pytest.mark.timeout(300)
def test_failed_calls_are_invalid_samples_not_zeros_and_counted(ray_session, tiny_config, tmp_path):
    cfg = tiny_config(trainer={"total_steps": 4, "max_reward_error_rate": 1.0},
                      reward=_reward(tmp_path, HALF_FAILS, "half"))
    out = tmp_path / "o"
    summary = train(cfg, output=str(out))
    assert summary["steps"] == 4
    rows = _rows(out)
    invalid = [r["samples/invalid"] for r in rows]
    assert sum(invalid) > 0 and summary["samples_invalid"] == sum(invalid)
    for r in rows:  # the failed samples are left out of the mean: the valid ones all scored 1.0
        assert r["reward/nan"] == r["samples/invalid"]
        assert r["rewards/half/error_rate"] == r["samples/invalid"] / SPS
        assert r["reward/mean"] == 1.0 or (r["samples/invalid"] == SPS and math.isnan(r["reward/mean"]))
    assert summary["reward_error_rate"] == {"half": round(sum(invalid) / (4 * SPS), 6)}
    assert summary["samples_trained"] == 4 * SPS  # invalid samples are counted as trained (in no loss term)


def test_the_progress_line_and_the_report_show_the_error_rate():
    from rewardhub_trainer.cli import _report
    from rewardhub_trainer.reward_failures import progress_postfix

    assert progress_postfix({"rewards/half/error_rate": 0.25, "rewards/ok/error_rate": 0.0,
                             "reward/mean": 1.0}) == {"err[half]": "0.25"}
    summary = {
        "mode": "sync",
        "steps": 4,
        "wall_s": 1.0,
        "throughput_samples_per_s": 1.0,
        "samples_generated": 8,
        "samples_trained": 8,
        "samples_dropped_stale": 0,
        "samples_unused_at_end": 0,
        "max_staleness_seen": 0,
        "staleness_limit": 0,
        "idle_ratio": {"rollouter": 0.0, "learner": 0.0},
        "weight_syncs": 3,
        "reward_error_rate": {"half": 0.25, "ok": 0.0},
        "samples_invalid": 2,
    }
    assert ("reward errors: half 25.0% of calls failed; 2 samples invalid (left out of the update)"
            in _report(summary))


@pytest.mark.timeout(300)
def test_on_failure_raise_stops_the_run_at_the_first_failure_with_one_line(
    ray_session, tiny_config, tmp_path
):
    cfg = tiny_config(
        trainer={"total_steps": 4}, reward=_reward(tmp_path, HALF_FAILS, "half", on_failure="raise")
    )
    out = tmp_path / "o"
    with pytest.raises(RunAborted) as info:
        train(cfg, output=str(out))
    msg = str(info.value)
    assert msg.startswith("reward_client: score failed: ") and "odd response" in msg and "\n" not in msg, msg
    assert not (out / "summary.json").exists()


ROUTED = '''
import rewardhub

@rewardhub.reward(data_sources=("gsm8k",))
def only_gsm8k(*, response, **kwargs):
    return 1.0
'''


@pytest.mark.timeout(300)
def test_a_reward_routed_to_no_sample_says_so_once(ray_session, tiny_config, tmp_path, capfd):
    """The tiny data has no gsm8k rows: the routed reward scores none of them, and the driver says so
    in one WARNING naming its routes (not once per step)."""
    cfg = tiny_config(trainer={"total_steps": 2}, reward=_reward(tmp_path, ROUTED, "only_gsm8k"))
    train(cfg, output=str(tmp_path / "o"))
    warnings = [line for line in capfd.readouterr().err.splitlines() if "applied to 0 of" in line]
    assert warnings == [
        f"WARNING: reward 'only_gsm8k' applied to 0 of {SPS} rows so far: it is routed to data_source in "
        "['gsm8k'], and no row matched, so it scored none of them (null); give rows a matching "
        "data_source, or turn its routing off with data_sources: [] in its config term"]


ALWAYS_RAISES = '''
def broken(*, response, **kwargs):
    raise ValueError("cannot parse the answer")
'''


@pytest.mark.timeout(300)
def test_a_short_run_whose_every_reward_call_failed_exits_non_zero_naming_it(
        ray_session, tiny_config, tmp_path, capfd):
    """Issue 42 §6: two steps (too few for the stop rule's three in a row), every call failed: the run
    ends with one ERROR line naming the reward and a non-zero exit, not a summary and exit 0."""
    from rewardhub.cli import main

    cfg = tiny_config(trainer={"total_steps": 2}, reward=_reward(tmp_path, ALWAYS_RAISES, "broken"))
    out = tmp_path / "o"
    capfd.readouterr()
    rc = main(["train", cfg, "--output", str(out), "--no-progress"])
    err = capfd.readouterr().err
    assert rc == 1, err
    errors = [ln for ln in err.splitlines() if ln.startswith("ERROR: ")]
    assert errors == [f"ERROR: reward 'broken': every one of its {2 * SPS} calls in the run failed, so "
                      "nothing was learned from it; last error: " + errors[0].split("last error: ")[1]], err
    assert "cannot parse the answer" in errors[0]
    assert [r["step"] for r in _rows(out)] == [1, 2] and not (out / "summary.json").exists()
