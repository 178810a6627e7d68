"""verl's trainer.nnodes / trainer.n_gpus_per_node / rollout tensor_model_parallel_size -> resources:."""

from __future__ import annotations

import pytest

from rewardhub.config import load_config
from rewardhub.config.loader import read_and_migrate
from rewardhub.errors import UsageError

REWARD = "reward.rewards=[{name: exact_match}]"


def test_verl_cluster_keys_become_resources():
    cfg, report = read_and_migrate(None, ["trainer.nnodes=2", "trainer.n_gpus_per_node=4",
                                          "actor_rollout_ref.rollout.tensor_model_parallel_size=2",
                                          "trainer.total_steps=3", REWARD])
    assert cfg["resources"] == {"nnodes": 2, "gpus_per_node": 4, "learner": {"num_gpus": 1},
                                "rollouter": {"num_gpus": 2}}
    # 8 GPUs: 1 for the learner, the other 7 make 3 rollouters of 2 GPUs
    assert cfg["trainer"] == {"total_steps": 3, "num_rollouters": 3}
    assert "actor_rollout_ref" not in cfg  # nothing else was under it
    assert {m["from"]: m["to"] for m in report.moved} == {
        "trainer.nnodes": "resources.nnodes", "trainer.n_gpus_per_node": "resources.gpus_per_node",
        "actor_rollout_ref.rollout.tensor_model_parallel_size": "resources.rollouter.num_gpus"}
    assert any("3 rollouter(s) of 2 GPU(s)" in n for n in report.notes)


def test_explicit_settings_win_when_they_agree_and_conflicts_fail():
    cfg, _ = read_and_migrate(None, ["trainer.n_gpus_per_node=2", "trainer.num_rollouters=1",
                                     "resources.learner.num_gpus=2", REWARD])
    assert cfg["resources"]["learner"] == {"num_gpus": 2} and cfg["trainer"]["num_rollouters"] == 1
    with pytest.raises(UsageError, match=r"trainer.n_gpus_per_node=2 sets resources.gpus_per_node, which the "
                                         r"config sets to 4"):
        read_and_migrate(None, ["trainer.n_gpus_per_node=2", "resources.gpus_per_node=4", REWARD])
    with pytest.raises(
        UsageError, match=r"^trainer.nnodes='two' is not valid\nexpected a whole number >= 0$"
    ):
        read_and_migrate(None, ["trainer.nnodes=two", REWARD])


def test_no_verl_keys_no_change():
    cfg, report = read_and_migrate(None, ["trainer.total_steps=3", REWARD])
    assert "resources" not in cfg and not report.moved


def test_the_trainer_accepts_the_migrated_config():
    trainer_config = pytest.importorskip("rewardhub_trainer.config")
    cfg = load_config(None, ["trainer.n_gpus_per_node=2", "model.tiny.arch=qwen2", REWARD])
    parsed = trainer_config.parse_config(cfg)
    assert parsed.resources.gpus_per_node == 2 and parsed.resources.learner.num_gpus == 1
    assert parsed.resources.rollouter.num_gpus == 1 and parsed.trainer.num_rollouters == 1
