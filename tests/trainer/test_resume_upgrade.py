"""Runs that survive an upgrade (issue 43 §4): ``--resume`` compares what the user set and what changes
the numbers, not the defaults of keys a later release added; a real difference has a documented way on
(``--allow-config-change``); a refused ``--resume`` leaves no empty ``--output``; a ``reward.remote`` run
is resumed with the same reward-code check as a local one; the verl mapping says what the KL term is."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

from rewardhub.errors import UsageError
from rewardhub_trainer.cli import train

#: keys of a reward term that the previous release did not have (its run folders lack them)
ADDED_SINCE = ("cache", "max_rpm", "data_sources")


def _as_an_older_release_wrote_it(config: dict) -> tuple[dict, str]:
    """``config`` without the keys added since, and the fingerprint that release recorded (the sha256 of
    the model, data and reward sections as written, less how the rewards run)."""
    old = json.loads(json.dumps(config, default=str))
    for term in old["reward"]["rewards"]:
        for key in ADDED_SINCE:
            term.pop(key)
    part = json.loads(json.dumps({k: old[k] for k in ("model", "data", "reward")}))
    part["reward"].pop("workers", None)
    for term in part["reward"]["rewards"]:
        for key in ("executor", "timeout_s", "max_concurrency", "retries", "memory_limit_mb"):
            term.pop(key, None)
    return old, hashlib.sha256(json.dumps(part, sort_keys=True, default=str).encode()).hexdigest()


def _old_run(folder: Path, config: dict, fingerprint: str, rewards: dict) -> None:
    from rewardhub_trainer.checkpoint import commit_checkpoint
    from rewardhub_trainer.checkpoint import staging_path
    from rewardhub_trainer.checkpoint import write_state

    folder.mkdir()
    (folder / "run.json").write_text(json.dumps({"fingerprint": fingerprint, "config": config,
                                                 "rewards": rewards}))
    staged = staging_path(folder / "checkpoints", 2)
    staged.mkdir()
    write_state(staged, {"step": 2, "data_cursor": 2, "counts": {}, "config": config, "rewards": rewards})
    commit_checkpoint(staged, 2, keep=1)


@pytest.mark.timeout(180)
def test_a_run_folder_of_the_previous_release_resumes_with_the_same_yaml(model_cache, tiny_config, tmp_path,
                                                                         capsys):
    from rewardhub.config import load_plan
    from rewardhub_trainer.prepare import prepare
    from rewardhub_trainer.runfolder import claim

    cfg = tiny_config()
    config = prepare(load_plan(cfg, ())).public_config()
    assert all(k in config["reward"]["rewards"][0] for k in ADDED_SINCE)
    old_config, old_print = _as_an_older_release_wrote_it(config)
    old = tmp_path / "old"
    _old_run(old, old_config, old_print, {})
    claim(old, config, resume=str(old), overwrite=False)  # before: "reward differs", and no way on
    (old / "run.json").unlink()  # from its checkpoint alone, too
    claim(old, config, resume=str(old), overwrite=False)
    # what the user set, even at a value that is not the default, and how rewards run, are no difference
    import yaml

    term = yaml.safe_load(Path(cfg).read_text())["reward"]["rewards"][0]
    runtime = prepare(load_plan(tiny_config(reward={"rewards": [
        {**term, "cache": True, "max_rpm": 600, "executor": "thread", "timeout_s": 5}]}), ())).public_config()
    claim(old, runtime, resume=str(old), overwrite=False)

    # a real difference is refused, naming the way on; --allow-config-change goes on with a warning
    other = prepare(load_plan(tiny_config(data={"seed": 7}), ())).public_config()
    with pytest.raises(UsageError, match=r"\(data differs\)\n.*or pass --allow-config-change"):
        claim(old, other, resume=str(old), overwrite=False)
    capsys.readouterr()
    claim(old, other, resume=str(old), overwrite=False, allow_config_change=True)
    assert "WARNING: --resume" in capsys.readouterr().err

    # a refused --resume leaves no empty --output behind (before: an empty folder)
    new = tmp_path / "new"
    with pytest.raises(UsageError, match=r"data differs"):
        train(tiny_config(data={"seed": 7}), output=str(new), resume=str(old))
    assert not new.exists()


@pytest.mark.timeout(240)
def test_a_remote_run_resumes_with_the_reward_code_check(model_cache, tiny_config, tmp_path):
    """``reward.remote``: the server's terms' code (here a reward file's sha256) is recorded and checked
    on --resume, as a local run's rewards are (before: nothing was recorded, nothing checked)."""
    pytest.importorskip("aiohttp")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from serve_process import Server

    from rewardhub.config import load_plan
    from rewardhub_trainer.checkpoint import latest_checkpoint
    from rewardhub_trainer.prepare import prepare
    from rewardhub_trainer.runfolder import check_resume_rewards

    reward = tmp_path / "digits.py"
    reward.write_text("def digits(*, response, **kw):\n"
                      "    return float(any(c.isdigit() for c in response))\n")
    served = tmp_path / "served.yaml"
    served.write_text(f"reward:\n  rewards:\n    - {{path: {reward}, function: digits}}\n")

    def identities() -> dict:
        with Server(served) as server:
            cfg = tiny_config(reward={"remote": {"url": server.url}, "rewards": []})
            return prepare(load_plan(cfg, ())).reward_identities()

    before = identities()
    assert list(before) == ["digits"] and before["digits"].startswith("sha256:")
    old = tmp_path / "old"
    _old_run(old, {}, "", before)
    ckpt = latest_checkpoint(old)
    assert ckpt is not None
    check_resume_rewards(ckpt, before, str(old), allow=False)
    reward.write_text(reward.read_text().replace("any(", "all("))
    after = identities()
    assert after["digits"] != before["digits"]
    with pytest.raises(UsageError, match=r"reward code changed since its checkpoint .*'digits'"):
        check_resume_rewards(ckpt, after, str(old), allow=False)


def test_the_verl_mapping_says_the_kl_term_is_clamped_as_the_code_clamps_it():
    from rewardhub_trainer.losses import KL_CLAMP
    from rewardhub_trainer.verl.rules import rule

    reason = " ".join(rule("actor_rollout_ref.actor.kl_loss_type") or ())
    assert "without the clamp" not in reason
    assert f"clamped to [-{KL_CLAMP:g}, {KL_CLAMP:g}]" in reason, reason
