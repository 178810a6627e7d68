"""Bad input gets one ``ERROR:`` line (and maybe a hint below it) and an exit code, never a traceback.

One test per case of issue 19's list.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest


def _bwrap_works() -> bool:
    if shutil.which("bwrap") is None:
        return False
    try:
        return subprocess.run(["bwrap", "--bind", "/", "/", "--dev", "/dev", "true"], capture_output=True,
                              timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


# a read-only mount is the only read-only folder root cannot write to (file modes do not stop it)
needs_bwrap = pytest.mark.skipif(not _bwrap_works(), reason="bubblewrap makes the read-only mount")


def _error(res, code):
    """The run's ERROR line; asserts the exit code and that no traceback was printed."""
    assert res.returncode == code, (res.returncode, res.stderr)
    assert "Traceback" not in res.stderr, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("ERROR: ")]
    assert len(lines) == 1, res.stderr
    return lines[0]


@pytest.fixture
def simple(tmp_path):
    reward = tmp_path / "r.py"
    reward.write_text("def compute_score(*, response, **kw):\n    return 1.0\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"reward:\n  rewards:\n    - path: {reward}\n")
    data = tmp_path / "d.jsonl"
    data.write_text('{"response": "a"}\n{"response": "b"}\n')
    return str(cfg), str(data)


def _readonly(path, *args):
    """``python -m rewardhub ARGS`` with ``path`` mounted read-only (root ignores file modes)."""
    cmd = ["bwrap", "--bind", "/", "/", "--dev", "/dev", "--ro-bind", str(path), str(path),
           sys.executable, "-m", "rewardhub", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=os.path.dirname(str(path)))


# ---- outputs -------------------------------------------------------------------------------------

def test_output_folder_missing(cli, simple, tmp_path):
    cfg, data = simple
    line = _error(cli("score", cfg, data, "-o", str(tmp_path / "nope" / "o.jsonl")), 2)
    assert line == (
        f"ERROR: -o {str(tmp_path / 'nope' / 'o.jsonl')!r}: the folder {str(tmp_path / 'nope')!r} "
        "does not exist"
    )


@needs_bwrap
def test_output_folder_read_only(simple, tmp_path):
    cfg, data = simple
    ro = tmp_path / "ro"
    ro.mkdir()
    line = _error(_readonly(ro, "score", cfg, data, "-o", str(ro / "o.jsonl")), 2)
    assert line == f"ERROR: -o {str(ro / 'o.jsonl')!r}: the folder {str(ro)!r} is not writable"
    assert os.listdir(ro) == []


def test_output_is_a_folder(cli, simple, tmp_path):
    cfg, data = simple
    line = _error(cli("score", cfg, data, "-o", str(tmp_path)), 2)
    assert line == f"ERROR: -o {str(tmp_path)!r} is a folder, not a file"


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="/dev/full is a disk that is always full")
def test_output_disk_full(cli, simple):
    cfg, data = simple
    line = _error(cli("score", cfg, data, "-o", "/dev/full"), 1)
    assert line == "ERROR: cannot write the scored rows to '/dev/full': No space left on device"


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="/dev/full is a disk that is always full")
def test_summary_json_failing_after_the_run_keeps_the_scores(cli, simple, tmp_path):
    cfg, data = simple
    out = tmp_path / "o.jsonl"
    res = cli("score", cfg, data, "-o", str(out), "--summary-json", "/dev/full")
    line = _error(res, 1)
    assert line == "ERROR: cannot write --summary-json '/dev/full': No space left on device"
    assert f"the scored rows are in {out}" in res.stderr
    assert [json.loads(x)["score"] for x in out.read_text().splitlines()] == [1.0, 1.0]


# ---- inputs --------------------------------------------------------------------------------------

def test_data_not_utf8(cli, simple, tmp_path):
    cfg, _ = simple
    data = tmp_path / "latin1.jsonl"
    data.write_bytes('{"response": "café"}\n'.encode("latin-1"))
    line = _error(cli("score", cfg, str(data)), 2)
    assert line == f"ERROR: {data}, row 1: not UTF-8 (byte 17 of the line)"


def test_config_not_utf8(cli, simple, tmp_path):
    _, data = simple
    cfg = tmp_path / "latin1.yaml"
    cfg.write_bytes("# café\nreward:\n  rewards: [exact_match]\n".encode("latin-1"))
    line = _error(cli("score", str(cfg), data), 2)
    assert line.startswith(f"ERROR: config {str(cfg)!r} is not UTF-8 text (byte b'\\xe9' at offset 5")


def test_reward_section_not_a_mapping(cli, simple, tmp_path):
    _, data = simple
    cfg = tmp_path / "three.yaml"
    cfg.write_text("reward: 3\n")
    assert _error(cli("score", str(cfg), data), 2) == "ERROR: reward must be a mapping, not int 3"
    assert _error(cli("check", str(cfg)), 2) == "ERROR: reward must be a mapping, not int 3"


def test_unset_variable_in_a_launch_script(cli, simple, tmp_path):
    _, data = simple
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/bash\npython3 -m verl.trainer.main_ppo \\\n"
                      "  custom_reward_function.path=$REWARD_DIR/r.py \\\n  trainer.total_epochs=1\n")
    env = {k: v for k, v in os.environ.items() if k != "REWARD_DIR"}
    res = subprocess.run([sys.executable, "-m", "rewardhub", "check", str(script)], capture_output=True,
                         text=True, env=env, timeout=120)
    assert _error(res, 2) == "ERROR: reward.rewards[0].path uses $REWARD_DIR, which is not set"
    assert "export REWARD_DIR=" in res.stderr
    res = subprocess.run([sys.executable, "-m", "rewardhub", "score", str(script), data], capture_output=True,
                         text=True, env=env, timeout=120)
    assert _error(res, 2) == "ERROR: reward.rewards[0].path uses $REWARD_DIR, which is not set"


def test_deeply_nested_json_row(cli, simple, tmp_path):
    cfg, _ = simple
    data = tmp_path / "deep.jsonl"
    data.write_text('{"response": "x"}\n{"response": "x", "e": ' + "[" * 50_000 + "]" * 50_000 + "}\n")
    assert _error(cli("score", cfg, str(data)), 2) == f"ERROR: {data}, row 2: JSON nested too deeply"


def test_yaml_alias_bomb_is_refused_quickly(cli, tmp_path):
    cfg = tmp_path / "bomb.yaml"
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    cfg.write_text("\n".join(lines) + "\nreward: {rewards: [{name: exact_match}]}\n")
    assert len(cfg.read_bytes()) < 1000
    start = time.monotonic()
    line = _error(cli("check", str(cfg)), 2)
    assert time.monotonic() - start < 30
    assert (
        line
        == f"ERROR: config {str(cfg)!r} expands to over 100,000 values through YAML aliases (&name / *name)"
    )


def test_aliases_that_stay_small_are_fine(cli, tmp_path):
    cfg = tmp_path / "ok.yaml"
    cfg.write_text("base: &b {weight: 1.0}\nreward:\n  rewards:\n    - {name: exact_match, <<: *b}\n")
    res = cli("check", str(cfg))
    assert res.returncode == 0, res.stderr


# ---- rewards ---------------------------------------------------------------------------------------

def test_reward_returning_a_huge_int_is_that_samples_error(cli, tmp_path):
    reward = tmp_path / "huge.py"
    reward.write_text(
        "def compute_score(*, response, **kw):\n    return 10**400 if response == 'huge' else 1\n"
    )
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"reward:\n  rewards:\n    - path: {reward}\n")
    data = tmp_path / "d.jsonl"
    data.write_text('{"response": "a"}\n{"response": "huge"}\n')
    res = cli("score", str(cfg), str(data))
    assert res.returncode == 0 and "Traceback" not in res.stderr
    rows = [json.loads(x) for x in res.stdout.splitlines()]
    # a failure is never a score (on_failure: nan)
    assert rows[0]["score"] == 1.0 and math.isnan(rows[1]["score"])
    assert "not a finite number" in rows[1]["errors"]["compute_score"]


def test_executor_ray_without_ray(simple, tmp_path, monkeypatch, capsys):
    from rewardhub.cli import main

    _, data = simple
    cfg = tmp_path / "ray.yaml"
    cfg.write_text(f"reward:\n  rewards:\n    - path: {tmp_path / 'r.py'}\n      executor: ray\n")
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    assert main(["score", str(cfg), data]) == 2
    err = capsys.readouterr().err
    assert (
        err.splitlines()[0]
        == "ERROR: reward term 'compute_score': compute_score has executor: ray, but Ray is "
        "not installed here"
    )
    assert main(["check", str(cfg)]) == 1
    err = capsys.readouterr().err
    assert "compute_score has executor: ray, but Ray is not installed here" in err and "pip install" in err


def test_score_rejects_a_misspelled_kwarg_like_check(cli, simple, tmp_path):
    _, data = simple
    reward = tmp_path / "k.py"
    reward.write_text("def compute_score(*, response, threshold=0.5):\n    return 1.0\n")
    cfg = tmp_path / "k.yaml"
    cfg.write_text(f"reward:\n  rewards:\n    - path: {reward}\n      kwargs: {{threshhold: 0.9}}\n")
    line = _error(cli("score", str(cfg), data), 2)
    assert line == ("ERROR: reward term 'compute_score': kwargs: compute_score has no parameter 'threshhold' "
                    "(did you mean 'threshold'?); it takes: threshold")
    res = cli("check", str(cfg))
    assert res.returncode == 1 and "has no parameter 'threshhold' (did you mean 'threshold'?)" in res.stderr


def test_overrides_after_an_option_say_where_they_go(cli, simple, tmp_path):
    cfg, data = simple
    res = cli("score", cfg, data, "-o", str(tmp_path / "o.jsonl"), "reward.aggregation=normalize_then_sum")
    line = _error(res, 2)
    assert line.startswith("ERROR: override 'reward.aggregation=normalize_then_sum' comes after an option")
    assert "rewardhub CONFIG DATA reward.aggregation=normalize_then_sum -o OUT.jsonl" in res.stderr
    assert not (tmp_path / "o.jsonl").exists()


# ---- migrate -------------------------------------------------------------------------------------

@needs_bwrap
def test_migrate_write_on_a_read_only_file(tmp_path):
    cfg = tmp_path / "legacy.yaml"
    cfg.write_text("custom_reward_function:\n  path: r.py\n")
    before = cfg.read_text()
    res = _readonly(cfg, "migrate", str(cfg), "--write")
    assert _error(res, 2) == f"ERROR: cannot rewrite {str(cfg)!r}: the file is read-only"
    assert cfg.read_text() == before
    assert sorted(os.listdir(tmp_path)) == ["legacy.yaml"]  # no stray .bak


def test_migrate_write_keeps_a_backup_and_no_temp_file(cli, tmp_path):
    cfg = tmp_path / "legacy.yaml"
    cfg.write_text("custom_reward_function:\n  path: r.py\n")
    res = cli("migrate", str(cfg), "--write")
    assert res.returncode == 0, res.stderr
    assert sorted(os.listdir(tmp_path)) == ["legacy.yaml", "legacy.yaml.bak"]
    assert "reward:" in cfg.read_text() and Path(str(cfg) + ".bak").read_text().startswith(
        "custom_reward_function"
    )


# ---- one validator, one wording: the core's reward: and the trainer's sections -----------------------

def test_reward_and_trainer_sections_fail_in_the_same_words(cli, tmp_path):
    """An unknown key and a bad choice read the same in ``reward:`` (``check``) and in the trainer's
    sections (``train``): the key path, what is wrong, the allowed values; one line, exit code 2."""
    pytest.importorskip("rewardhub_trainer")
    cfg = tmp_path / "c.yaml"
    cfg.write_text("model: {tiny: {arch: qwen2}}\nreward:\n  rewards: [{name: exact_match}]\n")
    out = str(tmp_path / "o")

    def check(*overrides):
        return cli("check", str(cfg), *overrides)

    def train(*overrides):
        return cli("train", str(cfg), *overrides, "--output", out)

    cases = [  # (run, the ERROR line, the line below it (the start of it))
        (
            check("reward.workers.num_workerz=2"),
            "unknown key reward.workers.num_workerz",
            "did you mean reward.workers.num_workers? allowed: ",
        ),
        (
            train("rollout.temprature=2"),
            "unknown key rollout.temprature",
            "did you mean rollout.temperature? allowed: ",
        ),
        (
            check("reward.aggregation=mean"),
            "reward.aggregation='mean' is not valid",
            "allowed: weighted_sum, normalize_then_sum",
        ),
        (train("trainer.mode=asynk"), "trainer.mode='asynk' is not valid", "allowed: sync, fully_async"),
        (
            check("reward.workers.num_cpus=-1"),
            "reward.workers.num_cpus=-1.0 is not valid",
            "allowed: a value >= 0",
        ),
        (train("rollout.max_new_tokens=0"), "rollout.max_new_tokens=0 is not valid", "allowed: a value >= 1"),
    ]
    for res, line, fix in cases:
        assert _error(res, 2) == f"ERROR: {line}"
        assert res.stderr.splitlines()[1].startswith(f"  {fix}")
    assert not os.path.exists(out)


# ---- optional dependencies: one "install the extra" error for each -------------------------------

def _without(cli, tmp_path, modules, *args):
    """``rewardhub ARGS`` in a process where ``modules`` cannot be imported (as if not installed)."""
    site = tmp_path / "hide"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(f"import sys\nfor m in {modules!r}:\n    sys.modules[m] = None\n")
    return cli(*args, env={"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])},
               cwd=str(tmp_path))


@pytest.mark.parametrize("case", ["data -o parquet", "score -o parquet", "score parquet rows", "doctor",
                                  "serve"])
def test_a_missing_optional_dependency_is_one_error_naming_its_extra(cli, simple, tmp_path, case):
    cfg, data = simple
    if case == "score parquet rows":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"response": ["a"]}), tmp_path / "rows.parquet")
    args, module, what, extra = {
        "data -o parquet": (["data", "code.functions", "-o", "x.parquet"], "pyarrow",
                            "-o x.parquet: writing parquet", "data"),
        "score -o parquet": (["score", cfg, data, "-o", "x.parquet"], "pyarrow",
                             "-o x.parquet: writing parquet", "data"),
        "score parquet rows": (["score", cfg, "rows.parquet"], "pyarrow",
                               "rows.parquet: reading parquet files", "data"),
        "serve": (["serve", cfg], "aiohttp", "rewardhub serve", "serve"),
        "doctor": (["doctor", cfg], "ray", "rewardhub doctor (it checks the reward workers of a Ray cluster)",
                   "ray"),
    }[case]
    res = _without(cli, tmp_path, [module], *args)
    assert _error(res, 2) == f"ERROR: {what} needs {module}, which is not installed here", res.stderr
    assert f"install it: {sys.executable} -m pip install 'rewardhub[{extra}]'" in res.stderr
    assert not (tmp_path / "x.parquet").exists()


def test_test_refuses_a_timeout_of_inf_or_nan(cli):
    for bad in ("inf", "nan", "0"):
        line = _error(cli("test", "exact_match", "--timeout", bad), 2)
        assert line.startswith(f"ERROR: --timeout {bad} ") and "give a number of seconds above 0" in line


def test_new_refuses_a_name_too_long_and_a_folder_it_cannot_write(cli, tmp_path):
    line = _error(cli("new", "a" * 300, cwd=str(tmp_path)), 2)
    assert line.startswith("ERROR: the name is 300 characters long") and "at most 100" in line
    (tmp_path / "a_file").write_text("")
    line = _error(cli("new", "zzq_reward", "--dir", str(tmp_path / "a_file" / "pkg")), 2)
    where = str(tmp_path / "a_file" / "pkg")
    assert line == f"ERROR: cannot write the package to {where!r}: Not a directory ({where})"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]
