"""Each top-level section has an owner, found through the ``rewardhub.config_owners`` entry points: the
core owns ``reward:`` (and reads verl's legacy reward keys and launch scripts), the trainer its own."""

from __future__ import annotations

import importlib.metadata
import warnings
from pathlib import Path

import pytest

from rewardhub.cli import main
from rewardhub.config import load_plan
from rewardhub.config.owners import ENTRY_POINT_GROUP
from rewardhub.config.owners import installed_owners
from rewardhub.errors import UsageError

REPO = Path(__file__).resolve().parent.parent
VERL_SCRIPT = """#!/bin/bash
python3 -m verl.trainer.main_ppo \\
    custom_reward_function.path=my_reward.py \\
    actor_rollout_ref.actor.optim.lr=1e-6 \\
    trainer.total_epochs=2
"""


@pytest.fixture
def owners_cleared():
    installed_owners.cache_clear()
    yield
    installed_owners.cache_clear()


@pytest.fixture
def no_trainer(monkeypatch, owners_cleared):
    """An install without the trainer: its ``rewardhub.config_owners`` entry point is not there."""
    real = importlib.metadata.entry_points

    def entry_points(**kw):
        if kw.get("group") == ENTRY_POINT_GROUP:
            return importlib.metadata.EntryPoints(())
        return real(**kw)

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)


def test_the_trainer_declares_its_owner_in_its_metadata():
    """The trainer's owner is found through its package's entry point (make install writes it)."""
    import tomllib

    meta = tomllib.loads((REPO / "trainer" / "pyproject.toml").read_text(encoding="utf-8"))
    assert meta["project"]["entry-points"][ENTRY_POINT_GROUP] == {
        "rewardhub-trainer": "rewardhub_trainer.verl.owner:TRAINER_OWNER"}


def test_an_owner_from_an_entry_point_owns_its_section(tmp_path, monkeypatch, owners_cleared):
    """A package's owner (a real distribution on sys.path) owns its section and migrates its own
    legacy key into it, in the one report."""
    (tmp_path / "extra_owner.py").write_text(
        "from rewardhub.config.owners import SectionOwner\n"
        "def migrate(cfg, report):\n"
        "    old = cfg.pop('old_extra', None)\n"
        "    if old is not None:\n"
        "        cfg.setdefault('extra', {})['value'] = old\n"
        "        report.moved.append({'from': 'old_extra', 'to': 'extra.value'})\n"
        "    return cfg\n"
        "OWNER = SectionOwner(name='extra', sections=('extra',), migrate=migrate)\n"
    )
    dist = tmp_path / "extra_owner-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: extra-owner\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\nextra = extra_owner:OWNER\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(UsageError, match="unknown key extra"):  # not yet installed: no owner
        with monkeypatch.context() as m:
            m.setattr(importlib.metadata, "entry_points", lambda **kw: importlib.metadata.EntryPoints(()))
            load_plan(None, ["extra.value=1"])
    installed_owners.cache_clear()
    assert "extra" in [o.name for o in installed_owners()]
    plan = load_plan(None, ["old_extra=3"])
    assert plan.config.extra.value == 3
    assert {"from": "old_extra", "to": "extra.value"} in plan.report.moved


def test_an_entry_point_that_is_no_owner_is_named(tmp_path, monkeypatch, owners_cleared):
    (tmp_path / "not_owner.py").write_text("OWNER = 'nope'\n")
    dist = tmp_path / "not_owner-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: not-owner\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\nbad = not_owner:OWNER\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(UsageError, match=r"bad = not_owner:OWNER .* is a str, not a SectionOwner"):
        load_plan(None, [])


def test_without_the_trainer_verl_trainer_keys_have_no_owner(no_trainer, tmp_path, capsys):
    """``rewardhub migrate`` without the trainer installed names the section nobody owns instead of mapping
    it onto a schema the core does not have; the reward keys still migrate."""
    script = tmp_path / "run.sh"
    script.write_text(VERL_SCRIPT)
    assert [o.name for o in installed_owners()] == ["rewardhub"]
    assert main(["migrate", str(script)]) == 2
    assert "no installed owner for `actor_rollout_ref.*`" in capsys.readouterr().err
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plan = load_plan(None, ["custom_reward_function.path=my_reward.py"])  # reward keys alone: fine
    assert plan.reward.rewards[0].function == "compute_score"
    with pytest.raises(UsageError, match=r"no installed owner for `trainer\.\*`"):
        load_plan(None, ["trainer.total_epochs=2"])
    with pytest.raises(UsageError, match="unknown key rewad\ndid you mean reward"):  # a misspelling is one
        load_plan(None, ["rewad.rewards=[]"])


def test_with_the_trainer_the_same_script_migrates(owners_cleared, tmp_path, capsys):
    script = tmp_path / "run.sh"
    script.write_text(VERL_SCRIPT)
    assert [o.name for o in installed_owners()] == ["rewardhub", "rewardhub-trainer"]
    assert main(["migrate", str(script)]) == 0
    out = capsys.readouterr().out
    assert "lr: 1.0e-06" in out and "total_epochs: 2" in out
