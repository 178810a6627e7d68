"""`rewardhub migrate` as a user runs it, on the real legacy examples: the report, YAML, overrides and
scripts it writes, its errors."""

from __future__ import annotations

import json
import shlex
import shutil
import warnings
from types import SimpleNamespace

import pytest
import yaml
from migrate_helpers import SHARED
from migrate_helpers import example_files

from rewardhub.config.loader import read_and_migrate
from rewardhub.config.loader import read_config_file
from rewardhub.config.overrides import is_override_word
from rewardhub.verl._shell import Reader
from rewardhub.verl._shell import Unsafe
from rewardhub.verl.shim import is_legacy_key
from rewardhub.verl.shim import migrate


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
