"""verl's trainer keys (data, model, rollout, optimizer, algorithm, trainer) -> the trainer's sections."""

from __future__ import annotations

import warnings

import pytest

from rewardhub.config.loader import read_and_migrate
from rewardhub.config.verl_trainer import NOT_HERE
from rewardhub.errors import RewardhubDeprecationWarning
from rewardhub.errors import UsageError


def mapped(*overrides: str):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg, report = read_and_migrate(None, list(overrides))
    msgs = [str(w.message) for w in caught if issubclass(w.category, RewardhubDeprecationWarning)]
    return cfg, report, msgs


def test_moves_and_drops_each_key_once_with_a_warning():
    cfg, report, msgs = mapped(
        "data.train_batch_size=16", "data.max_response_length=256", "data.train_files=a.parquet",
        "actor_rollout_ref.model.path=/m", "actor_rollout_ref.actor.optim.lr=1e-6",
        "actor_rollout_ref.actor.use_kl_loss=True", "actor_rollout_ref.actor.kl_loss_coef=0.01",
        "actor_rollout_ref.rollout.n=5", "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.rollout.val_kwargs.do_sample=False", "actor_rollout_ref.rollout.val_kwargs.n=1",
        "actor_rollout_ref.actor.fsdp_config.param_offload=True", "algorithm.adv_estimator=grpo",
        "algorithm.norm_adv_by_std_in_grpo=False", "trainer.total_training_steps=7", "trainer.total_epochs=3",
        "trainer.save_freq=5", "trainer.test_freq=5", "trainer.logger=[console,wandb]")
    assert cfg["rollout"] == {"prompts_per_step": 16, "max_new_tokens": 256, "n": 5, "engine": "vllm",
                              "val_temperature": 0.0, "val_n": 1}
    assert cfg["model"] == {"path": "/m"}
    # verl's loss aggregation and weight decay defaults are carried over (the script is verl's)
    assert cfg["trainer"] == {"lr": 1e-6, "kl_coef": 0.01, "scale_advantages": False, "total_steps": 7,
                              "checkpoint_every": 5, "test_freq": 5, "logger": ["console", "wandb"],
                              "loss_agg_mode": "token-mean", "weight_decay": 0.01}
    assert cfg["data"] == {"train_files": "a.parquet"}  # the trainer's own key: untouched
    assert "actor_rollout_ref" not in cfg and "algorithm" not in cfg
    dropped = {d["key"]: d for d in report.dropped}
    assert "FSDP/Megatron" in dropped["actor_rollout_ref.actor.fsdp_config.param_offload"]["reason"]
    assert "trainer.num_learners" in dropped["actor_rollout_ref.actor.fsdp_config.param_offload"]["reason"]
    assert "total_training_steps" in dropped["trainer.total_epochs"]["reason"]  # as in verl, steps win
    accounted = [m["from"] for m in report.moved] + list(dropped)
    assert len(accounted) == len(set(accounted)) == 17 == len(msgs)  # all but the 2 trainer keys


def test_kl_only_from_the_loss_or_the_reward_switch():
    cfg, report, _ = mapped("actor_rollout_ref.actor.use_kl_loss=False", "actor_rollout_ref.actor.kl_loss_coef=0.1",
                            "algorithm.kl_ctrl.kl_coef=0.001")
    assert "kl_coef" not in cfg["trainer"]  # neither applies in verl, so neither here
    assert {d["key"] for d in report.dropped} == {"actor_rollout_ref.actor.use_kl_loss",
                                                  "actor_rollout_ref.actor.kl_loss_coef", "algorithm.kl_ctrl.kl_coef"}
    cfg, report, _ = mapped("algorithm.use_kl_in_reward=True", "algorithm.kl_ctrl.kl_coef=0.001")
    assert cfg["trainer"]["kl_coef"] == 0.001 and any("in the loss" in n for n in report.notes)


def test_conflicts_and_what_is_left_alone():
    with pytest.raises(UsageError, match="rollout.prompts_per_step"):
        mapped("data.train_batch_size=16", "rollout.prompts_per_step=8")
    with pytest.raises(UsageError, match="both set rollout.max_new_tokens"):
        mapped("data.max_response_length=16", "actor_rollout_ref.rollout.response_length=32")
    cfg, report, _ = mapped("data.train_batch_size=8", "rollout.prompts_per_step=8", *(f"{k}=2" for k in NOT_HERE),
                            "trainer.mode=fully_async", "data.max_prompt_lenght=3")
    # the resource keys are the resources table's (config/verl_resources.py: 2 nodes x 2 GPUs, one for
    # the learner, the other three as one rollouter of tensor_model_parallel_size 2); the trainer's own
    # keys and typos are the schema's to judge
    assert cfg["trainer"] == {"mode": "fully_async", "num_rollouters": 1}
    assert cfg["resources"] == {"nnodes": 2, "gpus_per_node": 2, "rollouter": {"num_gpus": 2},
                                "learner": {"num_gpus": 1}}
    assert "actor_rollout_ref" not in cfg
    assert cfg["data"] == {"max_prompt_lenght": 3}
    assert sorted(m["from"] for m in report.moved) == sorted(
        ["data.train_batch_size", *NOT_HERE]) and not report.dropped


def test_total_epochs_alone_is_the_trainers_own_key():
    cfg, report, msgs = mapped("trainer.total_epochs=2", "trainer.default_local_dir=ck")
    assert cfg["trainer"] == {"total_epochs": 2, "default_local_dir": "ck"} and not report and not msgs


def test_an_interpolation_is_dropped_not_resolved():
    cfg, report, _ = mapped("actor_rollout_ref.rollout.response_length=${data.max_response_length}")
    assert "rollout" not in cfg and "interpolation" in report.dropped[0]["reason"]
