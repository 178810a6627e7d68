"""A reward package that does not import rewardhub declares its policy as a plain ``__rewardhub__`` dict:
``rewardhub list`` shows it without importing the module, loading it applies it (the timeout kills), and a
wrong key is named with the allowed ones."""

from __future__ import annotations

import json
import math
import os

from rewardhub.testing import write_distribution

PLAIN = '''
import time

open({marker!r}, "w").close()


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """1.0 when the response is the ground truth; 'slow' sleeps."""
    if solution_str == "slow":
        time.sleep(30)
    return float(solution_str == ground_truth)


compute_score.__rewardhub__ = {policy}
'''


def _install(tmp_path, policy, name="plain_one"):
    marker = tmp_path / "imported"
    write_distribution(tmp_path / "site", name.replace("_", "-"), "2.0",
                       {"rewardhub.rewards": {name: f"{name}_mod:compute_score"}},
                       {f"{name}_mod": PLAIN.format(marker=str(marker), policy=policy)})
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), os.environ.get("PYTHONPATH", "")]),
           "REWARDHUB_NO_CACHE": "1"}
    return env, marker


def test_plain_policy_is_listed_without_import_and_applied_when_scoring(cli, tmp_path):
    env, marker = _install(tmp_path, '{"timeout_s": 2, "pure": True, "data_sources": ["demo"]}')
    res = cli("list", "--json", env=env)
    assert res.returncode == 0, res.stderr
    row = {r["name"]: r for r in json.loads(res.stdout)}["plain_one"]
    assert (row["dist"], row["version"], row["source"]) == ("plain-one", "2.0", "entry-point")
    assert row["policy"]["timeout_s"] == 2 and row["policy"]["pure"] is True
    assert row["data_sources"] == ["demo"]
    assert row["policy_text"] == "timeout 2s, pure, data_sources demo"
    assert row["summary"] == "1.0 when the response is the ground truth; 'slow' sleeps."
    assert not marker.exists()  # read from the source, not imported
    table = cli("list", env=env).stdout
    assert "timeout 2s, pure, data_sources demo" in table
    # loaded, the same policy: `show` and scoring use it
    shown = json.loads(cli("show", "plain_one", "--json", env=env).stdout)
    assert shown["policy"]["timeout_s"] == 2 and shown["policy"]["pure"] is True
    assert shown["data_sources"] == ["demo"] and shown["runs_on"].startswith("process")
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("reward:\n  rewards:\n    - name: plain_one\n")
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({"response": r, "ground_truth": "5", "data_source": "demo"}) + "\n"
                            for r in ("5", "4", "slow")))
    res = cli("score", str(cfg), str(data), "--no-progress", env=env, timeout=60)
    assert res.returncode == 0, res.stderr
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    assert [r["rewards"]["plain_one"] for r in rows[:2]] == [1.0, 0.0]
    # the declared 2 s timeout ended the sleeping call (the reward sleeps 30 s)
    assert math.isnan(rows[2]["rewards"]["plain_one"])
    assert "timed out after 2s" in rows[2]["errors"]["plain_one"]


def test_a_wrong_plain_key_is_named_with_the_allowed_ones(cli, tmp_path):
    env, _ = _install(tmp_path, '{"timeout": 2}', name="plain_bad")
    res = cli("list", "--json", env=env)
    assert res.returncode == 0, res.stderr
    row = {r["name"]: r for r in json.loads(res.stdout)}["plain_bad"]
    assert row["policy_text"].startswith(
        "invalid: reward 'plain_bad' (plain_bad_mod:compute_score): __rewardhub__ key 'timeout' is not known "
        "(did you mean 'timeout_s'?); allowed: name, kind")
    res = cli("show", "plain_bad", env=env)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.startswith(
        "ERROR: reward 'plain_bad' (plain_bad_mod:compute_score): __rewardhub__ key 'timeout' is not known "
        "(did you mean 'timeout_s'?)\n  allowed: name, kind"), res.stderr


def test_decorator_arguments_are_listed_as_loading_gives_them(cli):
    listed = {r["name"]: r for r in json.loads(cli("list", "--json").stdout)}
    for name in ("math_verify", "code_tests"):
        shown = json.loads(cli("show", name, "--json").stdout)
        assert listed[name]["policy"] == shown["policy"], name
    assert listed["code_tests"]["policy_text"] == "process, timeout 60s, cache"


def test_check_reads_a_plain_policy_from_a_reward_file(cli, tmp_path):
    reward = tmp_path / "r.py"
    cfg = tmp_path / "c.yaml"
    cfg.write_text("reward:\n  rewards:\n    - path: r.py\n      function: compute_score\n")
    marker = tmp_path / "imported"
    reward.write_text(PLAIN.format(marker=str(marker), policy='{"timeout_s": 3}'))
    res = cli("check", str(cfg), cwd=str(tmp_path))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "executor process (inline with timeout_s 3" in res.stdout and "timeout 3," in res.stdout
    assert not marker.exists()  # read, not run
    reward.write_text(PLAIN.format(marker=str(marker), policy='{"timeout_s": "3"}'))
    res = cli("check", str(cfg), cwd=str(tmp_path))
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert "__rewardhub__['timeout_s'] = '3' is not valid: expected a number of seconds above 0" in \
        res.stdout + res.stderr
