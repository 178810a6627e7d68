"""`rewardhub check` on legacy configs: the verl reward file resolved, every problem listed, relative
paths."""

from __future__ import annotations

import json
import os
import shutil

import yaml
from migrate_helpers import SHARED

VERL_REWARD = '''\
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    """verl's signature: 1.0 when the last word of the response is the answer."""
    words = solution_str.strip().split()
    return 1.0 if words and words[-1] == str(ground_truth) else 0.0


def aer_gui_reward_function(data_source, solution_str, ground_truth, extra_info=None):
    return 0.5 if str(ground_truth) in solution_str else 0.0
'''


# ---- check -----------------------------------------------------------------------------------------

def test_check_a_legacy_config_resolves_the_verl_reward_file(cli, tmp_path):
    (tmp_path / "recipe" / "infigui-g1").mkdir(parents=True)
    (tmp_path / "recipe" / "infigui-g1" / "reward_fn.py").write_text(VERL_REWARD)
    shutil.copy(SHARED / "relative-path.overrides", tmp_path)
    r = cli("check", "relative-path.overrides", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "aer_gui_reward_function" in r.stdout and "OK (1 reward term" in r.stdout
    r = cli("check", "relative-path.overrides", "--json", cwd=tmp_path)
    out = json.loads(r.stdout)
    assert out["problems"] == [] and out["terms"][0]["target"].endswith(
        "reward_fn.py:aer_gui_reward_function"
    )
    assert out["migration"]["moved"][0]["from"] == "custom_reward_function.path"


def test_check_lists_every_problem(cli, tmp_path):
    (tmp_path / "r.py").write_text(VERL_REWARD)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"reward": {"rewards": [
        {"name": "math_verfy"},
        {"path": "missing.py"},
        {"path": "r.py", "function": "nope"},
        {"path": "r.py", "function": "compute_score", "alias": "verl_fn", "kwargs": {"scale": 2}},
        {"name": "exact_match"},
    ]}}))
    r = cli("check", str(cfg))
    assert r.returncode == 1
    err = r.stderr
    assert "4 problem(s)" in err
    assert "reward.rewards[0]" in err and "did you mean: 'math_verify'" in err
    assert "reward.rewards[1]" in err and "missing.py" in err
    assert "reward.rewards[2]" in err and "nope" in err
    assert "reward.rewards[3].kwargs" in err and "'scale'" in err
    assert "ok  reward.rewards[4] exact_match" in r.stdout
    assert "Traceback" not in err


def test_check_invalid_value_names_key_and_allowed(cli, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("reward:\n  rewards:\n    - name: exact_match\n      on_failure: ignore\n")
    r = cli("check", str(cfg))
    assert r.returncode == 2
    assert "reward.rewards[0].on_failure='ignore'" in r.stderr and "zero, nan, drop, raise" in r.stderr


def test_check_reward_model_without_a_path(cli, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("reward_model:\n  enable: true\nreward:\n  rewards: [exact_match]\n")
    r = cli("check", str(cfg))
    assert r.returncode == 1 and "reward.reward_model.model_path" in r.stderr
    assert "reward_model.model.path" in r.stderr  # the legacy spelling too


def test_relative_paths_from_file_and_from_command_line(cli, tmp_path):
    conf = tmp_path / "conf"
    work = tmp_path / "work"
    conf.mkdir()
    work.mkdir()
    (conf / "r.py").write_text(VERL_REWARD)
    (work / "w.py").write_text(VERL_REWARD)
    (conf / "c.yaml").write_text("custom_reward_function:\n  path: r.py\n")
    r = cli("check", str(conf / "c.yaml"), "--json", cwd=work)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["terms"][0]["target"] == f"{conf / 'r.py'}:compute_score"
    # typed on the command line: relative to the working directory
    r = cli("check", str(conf / "c.yaml"), "custom_reward_function.path=w.py", "--json", cwd=work)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["terms"][0]["target"] == f"{work / 'w.py'}:compute_score"
    # both exist: the file's folder wins for a path written in the file, and the choice is said
    (work / "r.py").write_text(VERL_REWARD)
    r = cli("check", str(conf / "c.yaml"), "--json", cwd=work)
    out = json.loads(r.stdout)
    assert out["terms"][0]["target"] == f"{conf / 'r.py'}:compute_score"
    assert any("exists relative to both" in n and str(conf / "r.py") in n for n in out["notes"])
    assert os.path.exists(work / "r.py")


def test_check_names_the_verl_reward_manager_it_replaced(cli, tmp_path):
    (tmp_path / "r.py").write_text(VERL_REWARD)
    (tmp_path / "c.yaml").write_text(
        "custom_reward_function:\n  path: r.py\nreward_model:\n  reward_manager: prime\n"
    )
    r = cli("check", "c.yaml", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["manager"] == "prime" and out["terms"][0]["executor"] == "process"
    assert any("reward.manager='prime'" in n for n in out["notes"])
