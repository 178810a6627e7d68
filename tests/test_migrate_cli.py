"""`rewardhub migrate` and `rewardhub check` as a user runs them, on the real legacy examples."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from rewardhub.config.loader import read_and_migrate
from rewardhub.config.loader import read_config_file
from rewardhub.config.overrides import is_override_word
from rewardhub.verl._shell import Reader
from rewardhub.verl._shell import Unsafe
from rewardhub.verl.shim import is_legacy_key
from rewardhub.verl.shim import migrate

SHARED = Path(__file__).resolve().parent / "data" / "legacy-examples"  # a copy of ../shared/legacy-examples

VERL_REWARD = '''\
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    """verl's signature: 1.0 when the last word of the response is the answer."""
    words = solution_str.strip().split()
    return 1.0 if words and words[-1] == str(ground_truth) else 0.0


def aer_gui_reward_function(data_source, solution_str, ground_truth, extra_info=None):
    return 0.5 if str(ground_truth) in solution_str else 0.0
'''


def example_files():
    return sorted(p for p in SHARED.glob("*") if p.suffix in (".yaml", ".overrides"))


@pytest.mark.parametrize("path", example_files(), ids=lambda p: p.name)
def test_migrate_report_json_matches_the_library(cli, path):
    r = cli("migrate", str(path), "--report", "json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert set(out) >= {"config", "moved", "dropped"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected, report = read_and_migrate(str(path))  # reward keys, then verl's trainer keys
    assert out["config"] == json.loads(json.dumps(expected))
    assert out["moved"] == report.moved
    assert [d["key"] for d in out["dropped"]] == [d["key"] for d in report.dropped]
    assert all(set(m) == {"from", "to"} for m in out["moved"])
    assert all({"key", "reason"} <= set(d) for d in out["dropped"])
    assert r.stdout == json.dumps(out, indent=2, sort_keys=True) + "\n"  # stable, sorted


def test_migrate_prints_yaml_and_a_summary(cli):
    r = cli("migrate", str(SHARED / "path-only-default-name.overrides"))
    assert r.returncode == 0, r.stderr
    assert yaml.safe_load(r.stdout) == {
        "reward": {"rewards": [{"path": "my_reward.py", "function": "compute_score"}]}
    }
    assert "custom_reward_function.path -> reward.rewards[0].path" in r.stderr
    assert "compute_score" in r.stderr  # the default name is said, not silently assumed


def test_migrate_overrides_alone_including_hydra_plus(cli):
    r = cli(
        "migrate",
        "custom_reward_function.path=r.py",
        "+reward_model.reward_kwargs.overlong_buffer_cfg.enable=True",
        "+reward_model.reward_kwargs.overlong_buffer_cfg.len=10",
        "++reward_model.reward_kwargs.max_resp_len=100",
        "--report",
        "json",
    )
    assert r.returncode == 0, r.stderr
    terms = json.loads(r.stdout)["config"]["reward"]["rewards"]
    assert terms == [{"path": "r.py", "function": "compute_score"},
                     {"name": "overlong_penalty", "kwargs": {"max_resp_len": 100, "overlong_buffer_len": 10}}]


def test_migrate_yaml_with_overrides(cli):
    r = cli(
        "migrate",
        str(SHARED / "top-level-custom-fn.yaml"),
        "custom_reward_function.name=other",
        "--report",
        "json",
    )
    assert r.returncode == 0, r.stderr
    cfg = json.loads(r.stdout)["config"]
    assert cfg["reward"]["rewards"] == [{"path": "recipe/deepeyes/deepeyes.py", "function": "other"}]
    # verl's trainer keys move too (rewardhub_trainer.verl.rules)
    assert (
        "data" not in cfg
        and cfg["rollout"] == {"prompts_per_step": 256}
        and cfg["trainer"] == {"total_epochs": 1}
    )


def test_write_yaml_keeps_comments_and_a_backup(cli, tmp_path):
    src = tmp_path / "run.yaml"
    text = """\
# my experiment
data:
  train_batch_size: 256   # prompts per step
custom_reward_function:   # the old spelling
  path: rewards.py
  name: score
reward_model:
  reward_manager: prime
trainer:
  # one epoch is enough
  total_epochs: 1
"""
    src.write_text(text)
    r = cli("migrate", str(src), "--write")
    assert r.returncode == 0, r.stderr
    new = src.read_text()
    assert (tmp_path / "run.yaml.bak").read_text() == text
    for comment in ("# my experiment", "# prompts per step", "# one epoch is enough"):
        assert comment in new
    cfg = yaml.safe_load(new)
    assert cfg["reward"] == {"rewards": [{"path": "rewards.py", "function": "score", "executor": "process"}],
                             "manager": "prime"}
    assert "custom_reward_function" not in cfg and "reward_model" not in cfg
    assert cfg["data"] == {"train_batch_size": 256}
    # a second run has nothing to do and leaves the file (and the backups) alone
    r2 = cli("migrate", str(src), "--write")
    assert r2.returncode == 0 and "nothing to migrate" in r2.stderr
    assert src.read_text() == new and not (tmp_path / "run.yaml.bak.1").exists()


SCRIPT = r"""#!/usr/bin/env bash
set -xeuo pipefail
# a DAPO run; custom_reward_function.path=in/a/comment.py stays a comment
MODEL=${MODEL:-$HOME/models/qwen}
python3 -m verl.trainer.main_ppo \
    data.train_batch_size=256 \
    reward_model.reward_manager=dapo \
    +reward_model.reward_kwargs.overlong_buffer_cfg.enable=True \
    +reward_model.reward_kwargs.overlong_buffer_cfg.len=4096 \
    +reward_model.reward_kwargs.overlong_buffer_cfg.log=False \
    +reward_model.reward_kwargs.max_resp_len=20480 \
    actor_rollout_ref.model.path="$MODEL" \
    custom_reward_function.path="$HOME/recipe/my reward.py" \
    custom_reward_function.name=compute_score_dapo \
    trainer.total_epochs=1 "$@"
echo done   # trailing comment
"""


def shell_words(text):
    """Every word of every command of ``text`` (assignments too), expanded where it can be, with its span."""
    r = Reader(text)
    out = []
    for cmd in r.commands():
        for raw in cmd:
            try:
                expanded = r.expand(raw, "a test")
            except Unsafe:
                expanded = [(text[raw.start:raw.end], True)]
            out += [SimpleNamespace(text=t, start=raw.start, end=raw.end) for t, _ in expanded]
    return out


def non_override_text(script: str) -> list[str]:
    """The script's bytes outside legacy override words, as the pieces between them."""
    pieces, pos = [], 0
    for w in shell_words(script):
        if is_override_word(w.text) and is_legacy_key(w.text.lstrip("+~").split("=", 1)[0]):
            pieces.append(script[pos:w.start])
            pos = w.end
    pieces.append(script[pos:])
    return pieces


def test_write_shell_script_rewrites_only_the_override_words(cli, tmp_path):
    src = tmp_path / "run_dapo.sh"
    src.write_text(SCRIPT)
    before = read_config_file(str(src))
    r = cli("migrate", str(src), "--write")
    assert r.returncode == 0, r.stderr
    new = src.read_text()
    assert (tmp_path / "run_dapo.sh.bak").read_text() == SCRIPT
    # every line without a legacy word is there, byte for byte, in order
    kept = [line for line in SCRIPT.splitlines(keepends=True)
            if not any(is_legacy_key(t.lstrip("+").split("=", 1)[0]) for t in line.split() if "=" in t)]
    it = iter(new.splitlines(keepends=True))
    assert all(any(line == other for other in it) for line in kept)
    assert "$HOME/recipe/my reward.py" in new and '"$MODEL"' in new  # the value's own text is kept
    # the new words mean the same as the old ones
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = migrate(before)[0]
    after = read_config_file(str(src))
    assert migrate(after)[0] == expected
    assert not [
        w
        for w in shell_words(new)
        if is_override_word(w.text) and is_legacy_key(w.text.lstrip("+").split("=")[0])
    ]
    # the script still parses as the same command for the shell
    words_old = [w.text for w in shell_words(SCRIPT) if not is_override_word(w.text)]
    words_new = [w.text for w in shell_words(new) if not is_override_word(w.text)]
    assert words_old == words_new
    assert "reward_model.reward_kwargs.overlong_buffer_cfg.log" in r.stderr  # dropped, and said so
    r2 = cli("migrate", str(src), "--write")
    assert r2.returncode == 0 and src.read_text() == new


@pytest.mark.parametrize(
    "path", [p for p in example_files() if p.suffix == ".overrides"], ids=lambda p: p.name
)
def test_write_overrides_files(cli, tmp_path, path):
    dst = tmp_path / path.name
    shutil.copy(path, dst)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = migrate(read_config_file(str(path)))[0]
    r = cli("migrate", str(dst), "--write")
    assert r.returncode == 0, r.stderr
    text = dst.read_text()
    assert text.endswith("\n")
    for line in text.splitlines():
        assert not is_legacy_key(shlex.split(line)[0].lstrip("+").split("=")[0]), line
    assert read_config_file(str(dst)) == expected


@pytest.mark.parametrize(
    "args,message",
    [
        (["no-such-file.yaml"], "does not exist"),
        (["--write"], "--write needs a FILE"),
        (
            ["custom_reward_function.path=a.py", "reward.custom_reward_function.path=b.py"],
            "custom_reward_function.path='a.py' and reward.custom_reward_function.path='b.py'",
        ),
        (["reward_model.reward_manager=prime", "reward.manager=naive"], "reward.manager"),
        (
            ["custom_reward_function.path=r.py", "reward.aggregation=avg"],
            "allowed: weighted_sum, normalize_then_sum",
        ),
    ],
)
def test_migrate_bad_input_is_a_clear_error(cli, tmp_path, args, message):
    r = cli("migrate", *args, cwd=tmp_path)
    assert r.returncode == 2
    assert r.stderr.startswith("ERROR: ") and message in r.stderr and "Traceback" not in r.stderr


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



# ---- issue 29 §2: launch scripts read as the shell reads them, or refused ----------------------------------

def script_config(tmp_path, body: str) -> dict:
    path = tmp_path / "run.sh"
    path.write_text("#!/bin/bash\n" + body)
    return read_config_file(str(path))


def test_only_the_verl_commands_words_expanded_as_the_shell_would(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = script_config(tmp_path, """\
set -e
ARGS="actor_rollout_ref.rollout.n=8 trainer.total_training_steps=5"
python3 prep.py --out data.dir=/elsewhere data.train_files=wrong.parquet
cat > notes.txt <<EOF
custom_reward_function.path=from_the_heredoc.py
EOF
python3 -m verl.trainer.main_ppo \\
    data.train_files=$(pwd)/train.parquet \\
    data.val_files=`pwd`/val.parquet \\
    custom_reward_function.path=r.py \\
    $ARGS 2>&1 | tee log.txt
echo "trainer.total_epochs=3 done"
""")
    assert cfg == {
        "data": {"train_files": f"{tmp_path}/train.parquet", "val_files": f"{tmp_path}/val.parquet"},
        "custom_reward_function": {"path": "r.py"},
        "actor_rollout_ref": {"rollout": {"n": 8}},
        "trainer": {"total_training_steps": 5},
    }


@pytest.mark.parametrize("body,line,words", [
    ("python3 -m verl.trainer.main_ppo data.train_files=$(ls *.parquet)\n", 2, "$(ls *.parquet)"),
    ("cd /data\npython3 -m verl.trainer.main_ppo data.train_files=`pwd`/t.parquet\n", 3, "$(pwd)"),
    ("python3 -m verl.trainer.main_ppo $EXTRA_ARGS\n", 2, "$EXTRA_ARGS"),
    ("N=$(nproc)\npython3 -m verl.trainer.main_ppo actor_rollout_ref.rollout.n=$N\n", 3, "$N"),
    ("python3 -m verl.trainer.main_ppo actor_rollout_ref.rollout.n=$((2*4))\n", 2, "$((2*4))"),
    ("python3 -m verl.trainer.main_ppo --config-path=cfg --config-name=mine a.b=1\n", 2, "--config-path"),
    ("python3 -m verl.trainer.main_ppo a.b=1\npython3 -m verl.trainer.main_ppo a.b=2\n", None, "lines 2, 3"),
])
def test_what_cannot_be_read_is_refused_with_its_line(tmp_path, body, line, words):
    from rewardhub.errors import UsageError

    with pytest.raises(UsageError) as err:
        script_config(tmp_path, body)
    assert words in str(err.value)
    if line:
        assert f"line {line}" in str(err.value)


def test_a_fully_async_entry_point_makes_a_fully_async_config(tmp_path):
    path = tmp_path / "async.sh"
    path.write_text("python -m recipe.fully_async_policy.fully_async_main \\\n"
                    "  async_training.staleness_threshold=1 async_training.trigger_parameter_sync_step=2 \\\n"
                    "  custom_reward_function.path=r.py\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg, report = read_and_migrate(str(path))
    assert cfg["trainer"]["mode"] == "fully_async" and cfg["trainer"]["sync_interval"] == 2
    assert cfg["trainer"]["staleness_limit"] == 3  # 2 - 1 + ceil(1 * 2)
    assert any("fully-async entry point recipe.fully_async_policy.fully_async_main (line 1)" in n
               for n in report.notes)
    path.write_text("python -m verl.trainer.main_ppo async_training.staleness_threshold=1 "
                    "custom_reward_function.path=r.py\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg, report = read_and_migrate(str(path))
    assert "mode" not in cfg.get("trainer", {})
    assert "does not run" in report.dropped[0]["reason"]


def test_migrate_warns_and_check_refuses_a_misspelt_verl_key(cli, tmp_path):
    path = tmp_path / "run.sh"
    path.write_text("python3 -m verl.trainer.main_ppo custom_reward_function.pth=r.py "
                    "actor_rollout_ref.rollout.nn=8\n")
    out = cli("migrate", str(path))
    assert out.returncode == 0
    assert "WARNING: unknown key custom_reward_function.pth (not a key of verl's config); did you mean " \
           "custom_reward_function.path?" in out.stderr
    assert "did you mean actor_rollout_ref.rollout.n?" in out.stderr and "inference engine" not in out.stderr
    out = cli("check", str(path))
    assert out.returncode == 2 and "ERROR: unknown key custom_reward_function.pth" in out.stderr
    assert "reward.rewards is empty" not in out.stderr


def test_agreeing_legacy_keys_each_get_a_line():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, report = read_and_migrate(None, ["custom_reward_function.path=r.py",
                                            "reward.custom_reward_function.path=r.py",
                                            "+reward_model.reward_kwargs.k=1", "+reward.reward_kwargs.k=1"])
    moved = {m["from"]: m["to"] for m in report.moved}
    assert moved["custom_reward_function.path"] == moved["reward.custom_reward_function.path"] == \
        "reward.rewards[0].path"
    assert (
        moved["reward_model.reward_kwargs.k"]
        == moved["reward.reward_kwargs.k"]
        == "reward.rewards[0].kwargs.k"
    )


SCRIPTS = [
    "python3 -m verl.trainer.main_ppo custom_reward_function.path=r.py custom_reward_function.name=f\n",
    "python3 -m verl.trainer.main_ppo \\\n  custom_reward_function.path=r.py \\\n  "
    "reward_model.reward_manager=prime\n",
    "python3 -m verl.trainer.main_ppo \\\n  data.train_files=t.parquet \\\n  "
    "custom_reward_function.path=r.py\necho ok\n",
    'python3 -m verl.trainer.main_ppo custom_reward_function.path="$HOME/my r.py" '
    'trainer.x=1 "$@" 2>&1 | tee l\n',
    "P=r.py\npython3 -m verl.trainer.main_ppo \\\n    custom_reward_function.path=$P \\\n"
    "    +reward_model.reward_kwargs.overlong_buffer_cfg.enable=True \\\n"
    "    +reward_model.reward_kwargs.overlong_buffer_cfg.len=16 \\\n    data.max_response_length=64\n",
    "cat > x <<EOF\nhello\nEOF\npython3 -m verl.trainer.main_ppo reward_model.reward_manager=naive \\\n"
    "  custom_reward_function.path='a b.py'; echo done\n",
    "python3 -m verl.trainer.main_ppo \\\n  sandbox_fusion.url=http://h/run \\\n  "
    "custom_reward_function.path=r.py\n",
]


@pytest.mark.parametrize("script", SCRIPTS)
def test_write_never_makes_a_script_bash_rejects(cli, tmp_path, script):
    import subprocess

    path = tmp_path / "run.sh"
    path.write_text(script)
    assert subprocess.run(["bash", "-n", str(path)]).returncode == 0
    out = cli("migrate", str(path), "--write")
    assert out.returncode == 0, out.stderr
    new = path.read_text()
    check = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert check.returncode == 0, (new, check.stderr)
    assert "custom_reward_function" not in new and "reward.rewards.0.path=" in new


def test_more_of_what_the_shell_does(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    cfg = script_config(tmp_path, """\
export N=4
STEPS=${STEPS:-7}
EXTRA=${EXTRA:-trainer.test_freq=2}
python3 -u -m verl.trainer.main_ppo --config-name=ppo_trainer \\
    --config-path=$HOME/verl/verl/trainer/config \\
    actor_rollout_ref.rollout.n=$N trainer.total_training_steps=$STEPS $EXTRA \\
    data.train_files="[$HOME/a.parquet,$HOME/b.parquet]" "$@"
""")
    assert cfg["actor_rollout_ref"] == {"rollout": {"n": 4}}
    assert cfg["trainer"]["total_training_steps"] == 7  # STEPS is not in the environment: the default
    assert cfg["trainer"]["test_freq"] == 2  # an unset variable's default, split into words
    # $HOME comes from the environment: its reference is kept (resolved when the config is loaded)
    assert cfg["data"]["train_files"] == ["${oc.env:HOME}/a.parquet", "${oc.env:HOME}/b.parquet"]
    from omegaconf import OmegaConf

    resolved = OmegaConf.to_container(OmegaConf.create(cfg), resolve=True)
    assert resolved["data"]["train_files"] == [f"{tmp_path}/a.parquet", f"{tmp_path}/b.parquet"]


def test_a_sourced_file_makes_its_variables_unknown(tmp_path):
    from rewardhub.errors import UsageError

    with pytest.raises(UsageError, match=r"\$MODEL in line 3 may be set by line 2: source env.sh"):
        script_config(
            tmp_path, "source env.sh\npython3 -m verl.trainer.main_ppo actor_rollout_ref.model.path=$MODEL\n"
        )


def test_a_hydra_flow_list_of_terms_is_read_as_one():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg, _ = read_and_migrate(None, ["custom_reward_function.path=r.py",
                                         "reward.rewards=[{path:r.py,function:compute_score}]"])
    assert cfg["reward"]["rewards"] == [{"path": "r.py", "function": "compute_score"}]  # the same term, once


def test_write_refuses_a_legacy_key_inside_a_variable_and_keeps_misspelt_ones(cli, tmp_path):
    path = tmp_path / "run.sh"
    script = ('R="custom_reward_function.path=r.py reward_model.reward_manager=prime"\n'
              "python3 -m verl.trainer.main_ppo $R\n")
    path.write_text(script)
    out = cli("migrate", str(path), "--write")
    assert out.returncode == 2 and "line 2: custom_reward_function.path comes from $R" in out.stderr
    assert path.read_text() == script
    path.write_text(
        "python3 -m verl.trainer.main_ppo custom_reward_function.path=r.py custom_reward_function.nme=f\n"
    )
    out = cli("migrate", str(path), "--write")
    assert out.returncode == 0 and "did you mean custom_reward_function.name?" in out.stderr
    assert path.read_text() == ("python3 -m verl.trainer.main_ppo reward.rewards.0.path=r.py "
                                "reward.rewards.0.function=compute_score custom_reward_function.nme=f\n")


LAYOUTS = {
    "one line": lambda words: "python3 -m verl.trainer.main_ppo " + " ".join(words) + "\n",
    "continued": lambda words: (
        "set -x\npython3 -m verl.trainer.main_ppo \\\n    "
        + " \\\n    ".join(["data.train_files=t.parquet", *words])
        + "\n"
    ),
    "continued, last word legacy, then more": lambda words: (
        "python3 -m verl.trainer.main_ppo \\\n  " + " \\\n  ".join(words) + ' \\\n  "$@" 2>&1 | tee l.txt\n'
        "echo done\n"
    ),
    "in a pipeline after a step": lambda words: (
        "python3 prep.py && python3 -m verl.trainer.main_ppo " + " ".join(words) + "; status=$?\n"
    ),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize(
    "path", [p for p in example_files() if p.suffix == ".overrides"], ids=lambda p: p.name
)
def test_write_keeps_every_example_a_valid_script(cli, tmp_path, path, layout):
    import subprocess

    words = [w for w in path.read_text().splitlines() if w.strip() and not w.startswith("#")]
    script = tmp_path / "run.sh"
    script.write_text(LAYOUTS[layout](words))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = read_and_migrate(str(script))[0]["reward"]
    out = cli("migrate", str(script), "--write")
    assert out.returncode == 0, out.stderr
    check = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert check.returncode == 0, (script.read_text(), check.stderr)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert read_and_migrate(str(script))[0]["reward"] == expected  # the same reward config, read back


@pytest.mark.parametrize(
    "body,message",
    [
        (
            "for lr in 1e-6 2e-6; do\n  python3 -m verl.trainer.main_ppo "
            "actor_rollout_ref.actor.optim.lr=$lr\ndone\n",
            r"\$lr in line 3 is set by the script in a way that cannot be read here",
        ),
        (
            'run() {\n  python3 -m verl.trainer.main_ppo "$@"\n}\nrun custom_reward_function.path=r.py\n',
            r"\$@ in line 3: the script defines a function",
        ),
        (
            "read -r MODEL < model.txt\npython3 -m verl.trainer.main_ppo "
            "actor_rollout_ref.model.path=$MODEL\n",
            r"\$MODEL in line 3 is set by the script",
        ),
        (
            'if [ -n "$BIG" ]; then\n  python3 -m verl.trainer.main_ppo a.b=1\nelse\n'
            "  python3 -m verl.trainer.main_ppo a.b=2\nfi\n",
            "lines 3, 5",
        ),
    ],
)
def test_loops_functions_and_branches_are_refused(tmp_path, body, message):
    from rewardhub.errors import UsageError

    with pytest.raises(UsageError, match=message):
        script_config(tmp_path, body)


@pytest.mark.parametrize(
    "body,line",
    [
        (
            "python3 -m verl.trainer.main_ppo \\\n    data.train_files=t.parquet \\\n    # the model\n"
            "    actor_rollout_ref.model.path=/m \\\n    custom_reward_function.path=r.py\n",
            5,
        ),
        (
            "python3 -m verl.trainer.main_ppo \\\n    data.train_files=t.parquet \\ \n    "
            "custom_reward_function.path=r.py\n",
            4,
        ),
        (
            "python3 -m verl.trainer.main_ppo \\\n    data.train_files=t.parquet\n    "
            "custom_reward_function.path=r.py\n",
            4,
        ),
    ],
)
def test_a_broken_continuation_is_refused_not_half_read(tmp_path, body, line):
    from rewardhub.errors import UsageError

    with pytest.raises(UsageError, match=f"line {line}: .* is a command of its own"):
        script_config(tmp_path, body)


def test_write_keeps_a_misspelt_key_of_a_yaml_file(cli, tmp_path):
    path = tmp_path / "cfg.yaml"
    path.write_text(
        "custom_reward_function:\n  path: r.py\n  nmae: my_fn  # typo\ntrainer:\n  total_steps: 3\n"
    )
    out = cli("migrate", str(path), "--write")
    assert out.returncode == 0 and "did you mean custom_reward_function.name?" in out.stderr
    written = yaml.safe_load(path.read_text())
    assert written["custom_reward_function"] == {"nmae": "my_fn"}  # kept for the user to fix, not lost
    assert written["reward"]["rewards"] == [{"path": "r.py", "function": "compute_score"}]


def test_words_inside_a_substitution_are_not_overrides(tmp_path):
    cfg = script_config(tmp_path, "N=$(python3 -c 'print(1)' trainer.total_training_steps=9)\n"
                                  "python3 -m verl.trainer.main_ppo trainer.total_epochs=2\n")
    assert cfg == {"trainer": {"total_epochs": 2}}


def test_an_assignment_is_not_split_but_its_unquoted_use_is(tmp_path):
    cfg = script_config(tmp_path, 'A="trainer.total_epochs=2 trainer.test_freq=1"\nB=$A\n'
                                  'python3 -m verl.trainer.main_ppo $B data.prompt_key="$A"\n')
    assert cfg == {"trainer": {"total_epochs": 2, "test_freq": 1},
                   "data": {"prompt_key": "trainer.total_epochs=2 trainer.test_freq=1"}}


FROM_ENV = [
    ('a.k="$RH_SECRET"', {"k": "s+/k=="}),
    ("a.k=${RH_SECRET}", {"k": "s+/k=="}),
    ("a.k=pre${RH_SECRET}post", {"k": "pres+/k==post"}),
    ("a.k=${RH_SECRET:-none}", {"k": "s+/k=="}),
    # quoted: bash would brace-expand an unquoted {...,...} into two words
    ('"+a.h={Authorization:\'Bearer $RH_SECRET\',n:2}"', {"h": {"Authorization": "Bearer s+/k==", "n": 2}}),
    ("a.l=[$RH_SECRET,b] a.n=$RH_NODES a.p=$RH_HOME/d", {"l": ["s+/k==", "b"], "n": 2, "p": "/h/u/d"}),
]


def _through(body: str, how: str) -> str:
    if how == "variable":  # the script sets its own variables from the environment
        return ("MY_SECRET=$RH_SECRET\nexport MY_NODES=${RH_NODES}\nMY_HOME=$RH_HOME\n"
                "python3 -m verl.trainer.main_ppo " + body.replace("$RH_", "$MY_").replace("${RH_", "${MY_"))
    if how == "word list":
        return f'ARGS="{body}"\npython3 -m verl.trainer.main_ppo $ARGS'
    if how == "array":
        return "ARGS=(\n    " + body + '\n)\npython3 -m verl.trainer.main_ppo "${ARGS[@]}"'
    return "python3 -m verl.trainer.main_ppo " + body


@pytest.mark.parametrize("body,expected,how", [
    (body, expected, how) for body, expected in FROM_ENV
    for how in ("direct", "variable", "word list", "array")
    # a quoted value inside a word list is not split so by bash either; a default is the script's own
    if not (how == "word list" and '"' in body) and not (how == "variable" and ":-" in body)
])
def test_a_value_from_the_environment_is_kept_as_its_reference(monkeypatch, body, expected, how):
    """What an override takes from the environment reaches the config as ``${oc.env:NAME}`` (resolved to
    the same value when loaded), never as the secret's text; a number stays a number."""
    from omegaconf import OmegaConf

    from rewardhub.config.overrides import apply_overrides
    from rewardhub.verl.scripts import read_script

    monkeypatch.setenv("RH_SECRET", "s+/k==")
    monkeypatch.setenv("RH_NODES", "2")
    monkeypatch.setenv("RH_HOME", "/h/u")
    words = [w.text for w in read_script(_through(body, how) + "\n").words]
    assert not any("s+/k==" in w for w in words), words
    resolved = OmegaConf.to_container(OmegaConf.create(apply_overrides({}, words)), resolve=True)
    assert resolved == {"a": expected}



#: verl's examples build the command in an array (recipe/dapo, examples/*_trainer): comments, quotes,
#: continuations, a nested default, +keys, an append, an empty array, "$@"
ARRAY_SCRIPT = """\
#!/usr/bin/env bash
set -xeuo pipefail

project_name='DAPO'
n_resp_per_prompt=8
TRAIN_FILE=${TRAIN_FILE:-"${RH_DATA_HOME}/data/dapo-math-17k.parquet"}
declare -a SPEC=()

ARGS=(
    data.train_files="${TRAIN_FILE}"
    data.prompt_key=prompt  # verl's default is prompt too
    # the rollout (n responses a prompt)
    actor_rollout_ref.rollout.n=${n_resp_per_prompt} \\
    +actor_rollout_ref.model.override_config.attention_dropout=0.
    "trainer.project_name=${project_name}"
    'trainer.experiment_name=DAPO run (7b)'
    trainer.logger='["console","wandb"]'
)
ARGS+=(trainer.total_epochs=2)

python3 -m verl.trainer.main_ppo \\
    "${ARGS[@]}" "${SPEC[@]}" \\
    trainer.nnodes=1 "$@" 2>&1 | tee log.txt
"""


def test_an_array_built_command_reads_as_bash_runs_it(tmp_path, monkeypatch):
    """The words are the ones bash hands to python3 (bash runs the script with a python3 that prints its
    arguments), with what came from the environment as its reference."""
    import re
    import subprocess

    from rewardhub.verl.scripts import read_script

    monkeypatch.setenv("RH_DATA_HOME", "/data/rh")
    monkeypatch.delenv("TRAIN_FILE", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python3").write_text('#!/bin/sh\nprintf "%s\\n" "$@" > argv.txt\n')
    (tmp_path / "bin" / "python3").chmod(0o755)
    (tmp_path / "run.sh").write_text(ARRAY_SCRIPT)
    env = dict(os.environ, PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    subprocess.run(["bash", "run.sh"], env=env, check=True, capture_output=True, timeout=60)
    bash = (tmp_path / "argv.txt").read_text().splitlines()

    words = [w.text for w in read_script(ARRAY_SCRIPT).words]
    assert words[0] == "data.train_files=${oc.env:RH_DATA_HOME}/data/dapo-math-17k.parquet"
    resolved = [re.sub(r"\$\{oc\.env:(\w+)\}", lambda m: os.environ[m.group(1)], w) for w in words]
    assert ["-m", "verl.trainer.main_ppo", *resolved] == bash
    cfg = script_config(tmp_path, ARRAY_SCRIPT)
    assert cfg["actor_rollout_ref"] == {"rollout": {"n": 8},
                                        "model": {"override_config": {"attention_dropout": 0.0}}}
    assert cfg["trainer"] == {"project_name": "DAPO", "experiment_name": "DAPO run (7b)",
                              "logger": ["console", "wandb"], "total_epochs": 2, "nnodes": 1}


@pytest.mark.parametrize("body,words", [  # script_config puts a #! line first: line 1 is the body's 0th
    ('A=(a.b=1)\nif [ -n "$X" ]; then\n  A+=(a.c=2)\nfi\npython3 -m verl.trainer.main_ppo "${A[@]}"\n',
     "A is changed inside an if/for/while/case block (line 4)"),
    ('A=(a.b=1)\n[ -n "$X" ] && echo x\nfor s in 1 2; do A+=(a.c=$s); done\n'
     'python3 -m verl.trainer.main_ppo "${A[@]}"\n', "A is changed inside an if/for/while/case block"),
    ('N=2\nif [ -n "$X" ]; then\n  N=4\nfi\npython3 -m verl.trainer.main_ppo a.n=$N\n',
     "$N in line 6 is set by the script in a way that cannot be read here"),
    ('A=(a.b=$(nproc))\npython3 -m verl.trainer.main_ppo "${A[@]}"\n', "$(nproc) in line 2 cannot be run"),
    ('A=(\n  a.b=1\npython3 -m verl.trainer.main_ppo "${A[@]}"\n', "line 2: the array's '(' is never closed"),
])
def test_an_array_that_cannot_be_known_is_refused_with_its_line(tmp_path, body, words):
    from rewardhub.errors import UsageError

    with pytest.raises(UsageError) as err:
        script_config(tmp_path, body)
    assert words in str(err.value)
