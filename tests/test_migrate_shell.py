"""Issue 29 §2: launch scripts read as the shell reads them, or refused (and `migrate --write` never
makes a script bash rejects)."""

from __future__ import annotations

import warnings

import pytest
from migrate_helpers import script_config

from rewardhub.config.loader import read_and_migrate


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
