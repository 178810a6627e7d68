"""verl 0.9.1's own reward loop, run for real on CPU with Ray (tests/verl_loop_driver.py): verl's
``RewardLoopManager`` starts its ``RewardLoopWorker`` actors from a config composed of verl's own YAML
defaults plus a user's legacy keys, migrated by verl's ``migrate_legacy_reward_impl`` as
``fully_async_main.py`` does, and trajectories reach the workers one at a time, as from verl's agent
loop. What verl cannot run here (rollout, actor, the GPU reward model) is not part of this path."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VERL_COMPAT = os.path.join(ROOT, ".venv", "verl-compat")

REWARD = '''import re

def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    m = re.search(r"####\\s*(-?\\d+)", solution_str)
    ok = m is not None and m.group(1) == str(ground_truth)
    # tool_bonus comes from the agent loop's tool_extra_fields, merged into extra_info as naive does
    return (1.0 if ok else 0.0) + 0.5 * float((extra_info or {}).get("tool_bonus", 0))
'''

SLOW = '''import time

def slow(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    if "hang" in solution_str:
        time.sleep(600)
    if "boom" in solution_str:
        raise ValueError("boom in the reward")
    return 0.0
'''

HANG, BOOM = {5, 17}, {9}


def _rows():
    rows = []
    for i in range(24):
        a = 7 * i
        tail = " hang" if i in HANG else " boom" if i in BOOM else ""
        rows.append(
            {
                "prompt": f"what is 7*{i}?",
                "response": f"so it is #### {a if i % 2 == 0 else a + 1}{tail}",
                "ground_truth": str(a),
                "data_source": "openai/gsm8k",
                "index": i,
                "tool_fields": {"tool_bonus": 1} if i % 3 == 0 else {},
            }
        )
    return rows


BREAKS = [None, "extra_info_text", "no_reward_model", "ground_truth_none", "no_ground_truth_key", None]


def _bad_rows():
    """The first rows, each broken as ``BREAKS`` says (see verl_loop_driver._break)."""
    return [dict(row, **({"break": how} if how else {})) for row, how in zip(_rows(), BREAKS)]


@pytest.fixture(scope="module")
def loop(tmp_path_factory):
    if not os.path.isdir(os.path.join(VERL_COMPAT, "verl")):
        pytest.skip("verl is not installed for the tests (make install puts it in .venv/verl-compat)")
    d = tmp_path_factory.mktemp("verl_loop")
    (d / "r.py").write_text(REWARD)
    (d / "slow.py").write_text(SLOW)
    fn = [f"custom_reward_function.path={d / 'r.py'}", "custom_reward_function.name=compute_score"]
    (d / "rh.yaml").write_text(f"reward:\n  rewards:\n    - {{path: {d / 'r.py'}, function: compute_score, "
                               "executor: process, timeout_s: 30}\n")
    (d / "rh_fail.yaml").write_text(
        f"reward:\n  rewards:\n    - {{path: {d / 'r.py'}, function: compute_score, executor: process}}\n"
        f"    - {{path: {d / 'slow.py'}, function: slow, executor: process, timeout_s: 2, on_failure: "
        f"zero}}\n"
    )
    legacy_manager = ["reward_model.reward_manager=rewardhub"]
    plan = {
        "folder": str(d),
        "rows": _rows(),
        "runs": [
            # the user's legacy keys, migrated as fully_async_main does
            {"name": "legacy", "overrides": fn + legacy_manager, "naive_overrides": fn, "batch_path": True},
            # a rewardhub YAML named by reward.reward_manager.module.path (a process-executor term)
            {
                "name": "yaml",
                "overrides": legacy_manager + [f"reward.reward_manager.module.path={d / 'rh.yaml'}"],
            },
            # a hanging and a raising term inside verl's worker: timeout_s and on_failure hold
            {
                "name": "failures",
                "overrides": legacy_manager + [f"reward.reward_manager.module.path={d / 'rh_fail.yaml'}"],
            },
            # no migration call: the new manager key, the legacy function key
            {
                "name": "unmigrated",
                "overrides": fn + ["reward.reward_manager.name=rewardhub"],
                "migrate": False,
            },
            # no migration call, only legacy keys: verl itself never reads reward_model.reward_manager then
            {
                "name": "unmigrated_legacy_manager",
                "overrides": fn + legacy_manager,
                "migrate": False,
                "local": True,
            },
            # malformed trajectories among good ones, through verl's actors one at a time
            {"name": "bad_rows", "rows": _bad_rows(), "overrides": fn + legacy_manager,
             "naive_overrides": fn},
            # a custom function and a rewardhub YAML both named
            {
                "name": "both",
                "overrides": fn + legacy_manager + [f"reward.reward_manager.module.path={d / 'rh.yaml'}"],
                "local": True,
            },
        ],
    }
    (d / "plan.json").write_text(json.dumps(plan))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([VERL_COMPAT, ROOT, os.environ.get("PYTHONPATH", "")]),
               RAY_USAGE_STATS_ENABLED="0", HF_HUB_OFFLINE="1")
    res = subprocess.run(
        [sys.executable, os.path.join(ROOT, "tests", "verl_loop_driver.py"), str(d / "plan.json")],
        capture_output=True,
        text=True,
        env=env,
        timeout=800,
        cwd=str(d),
    )
    assert res.returncode == 0, res.stderr[-4000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def _scores(results):
    return [r["reward_score"] for r in results]


def _expected():
    return [(1.0 if i % 2 == 0 else 0.0) + (0.5 if i % 3 == 0 else 0.0) for i in range(24)]


@pytest.mark.timeout(900)
def test_legacy_keys_migrated_by_verl_score_as_verls_naive_manager(loop):
    run = loop["legacy"]
    assert "error" not in run, run.get("error")
    assert run["manager"] == "RewardhubLoopManager" and run["naive_manager"] == "NaiveRewardManager"
    # tool_extra_fields merged as naive does
    assert _scores(run["ours"]) == _scores(run["naive"]) == _expected()
    for ours, naive in zip(run["ours"], run["naive"]):
        info = ours["reward_extra_info"]
        assert info["acc"] == naive["reward_extra_info"]["acc"]  # verl's val-core/<source>/acc metrics
        assert info["rewardhub_failed"] == 0.0 and info["rewardhub_error"] == ""
    # one trajectory per call: the calls that arrive together are scored as one group
    assert run["stats"]["batched_samples"] == 24 and 1 <= run["stats"]["batches"] <= 24
    # verl's other path (compute_rm_score: all rows at once) stacks the same keys for every row
    assert run["rm_scores"] == _expected()
    assert {"acc", "score", "rewardhub_failed", "rewardhub_error"} <= set(run["rm_keys"])


@pytest.mark.timeout(900)
def test_a_rewardhub_yaml_named_by_module_path_scores_the_same(loop):
    run = loop["yaml"]
    assert "error" not in run, run.get("error")
    assert run["manager"] == "RewardhubLoopManager"
    # a process-executor term with groups in flight at once: no call may fail (concurrent Runner.score)
    assert [r["error"] for r in run["ours"] if "error" in r] == []
    assert [r["reward_extra_info"]["rewardhub_error"] for r in run["ours"]] == [""] * 24
    assert _scores(run["ours"]) == _scores(loop["legacy"]["naive"])


@pytest.mark.timeout(900)
def test_timeouts_and_on_failure_hold_inside_verls_worker(loop):
    run = loop["failures"]
    assert "error" not in run, run.get("error")
    infos = [r["reward_extra_info"] for r in run["ours"]]
    # the failed term gives 0.0 (on_failure: zero), the other counts
    assert _scores(run["ours"]) == _expected()
    failed = {i for i, info in enumerate(infos) if info["rewardhub_failed"] == 1.0}
    assert failed == HANG | BOOM
    for i in HANG:
        assert "timed out after 2s" in infos[i]["rewardhub_error"]
        assert infos[i]["acc"] is None and infos[i]["slow"] == 0.0
    for i in BOOM:
        assert "boom in the reward" in infos[i]["rewardhub_error"]
    assert all(info["rewardhub_error"] == "" for i, info in enumerate(infos) if i not in failed)
    # a hang costs its timeout, not the rest of the batch's time (30 s would be the other term's)
    assert max(run["latency"]) < 30


@pytest.mark.timeout(900)
def test_without_the_migration_call_the_users_function_is_taken_not_verls_default(loop):
    run = loop["unmigrated"]
    assert "error" not in run, run.get("error")
    assert run["manager"] == "RewardhubLoopManager"
    # reward.custom_reward_function.path=None (verl's default) meets the legacy custom_reward_function.path:
    # the one the user set is used (never verl's default scorer, never a "disagree" error)
    assert _scores(run["ours"]) == _expected()


@pytest.mark.timeout(900)
def test_without_the_migration_call_verl_does_not_read_the_legacy_manager_key(loop):
    """The boundary: with only legacy keys and no migration call, verl's loader never reads
    ``reward_model.reward_manager`` and builds its own ``naive`` manager; rewardhub is not called at
    all (nothing it can check: the README says to call migrate_legacy_reward_impl, as verl's own
    entry points do, or to set reward.reward_manager.name)."""
    assert loop["unmigrated_legacy_manager"]["manager"] == "NaiveRewardManager"


@pytest.mark.timeout(900)
def test_a_malformed_trajectory_fails_alone_and_a_none_ground_truth_is_passed_as_naive_passes_it(loop):
    """Trajectories sent one at a time to verl's reward workers: one with extra_info that is no dict,
    one without reward_model, one whose reward_model has no ground_truth key (verl's naive manager
    raises for these three), and one whose ground truth is None (naive passes None to the function)."""
    run = loop["bad_rows"]
    assert "error" not in run, run.get("error")
    ours, naive = run["ours"], run["naive"]
    assert [r.get("error") for r in ours] == [None] * 6  # no trajectory raised
    assert _scores(ours) == [1.5, 0.0, 0.0, 0.5, 0.0, 0.0]
    infos = [r["reward_extra_info"] for r in ours]
    assert [i["rewardhub_failed"] for i in infos] == [0.0, 1.0, 1.0, 0.0, 1.0, 0.0]
    assert "non_tensor_batch['extra_info'][0] is the string 'index 7'" in infos[1]["rewardhub_error"]
    assert "no non_tensor_batch['reward_model']" in infos[2]["rewardhub_error"]
    assert "without 'ground_truth'" in infos[4]["rewardhub_error"]
    # naive fails the three malformed ones; the others (the None ground truth included) score the same
    assert [i for i, r in enumerate(naive) if "error" in r] == [1, 2, 4]
    assert [ours[i]["reward_score"] for i in (0, 3, 5)] == [naive[i]["reward_score"] for i in (0, 3, 5)]


@pytest.mark.timeout(900)
def test_a_custom_function_and_a_module_path_yaml_both_set_is_an_error_naming_both(loop):
    err = loop["both"]["error"]
    assert "reward.custom_reward_function.path=" in err and "reward.reward_manager.module.path=" in err
    assert "keep one" in err


def test_expected_scores_cover_right_wrong_and_tool_bonus():
    exp = _expected()
    assert {0.0, 0.5, 1.0, 1.5} == set(exp) and not any(math.isnan(x) for x in exp)
