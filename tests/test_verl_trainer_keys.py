"""verl's trainer keys (data, model, rollout, optimizer, algorithm, trainer) -> the trainer's sections."""

from __future__ import annotations

import warnings

import pytest
import yaml

from rewardhub.config.loader import read_and_migrate
from rewardhub.errors import RewardhubDeprecationWarning
from rewardhub.errors import UsageError
from rewardhub_trainer.verl.rules import NOT_HERE


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
    # all but the trainer's own keys (same names)
    assert len(accounted) == len(set(accounted)) == 16 == len(msgs)


def test_kl_only_from_the_loss_or_the_reward_switch():
    cfg, report, _ = mapped(
        "actor_rollout_ref.actor.use_kl_loss=False",
        "actor_rollout_ref.actor.kl_loss_coef=0.1",
        "algorithm.kl_ctrl.kl_coef=0.001",
    )
    assert "kl_coef" not in cfg["trainer"]  # neither applies in verl, so neither here
    assert {d["key"] for d in report.dropped} == {
        "actor_rollout_ref.actor.use_kl_loss",
        "actor_rollout_ref.actor.kl_loss_coef",
        "algorithm.kl_ctrl.kl_coef",
    }
    cfg, report, _ = mapped("algorithm.use_kl_in_reward=True", "algorithm.kl_ctrl.kl_coef=0.001")
    assert cfg["trainer"]["kl_coef"] == 0.001 and any("in the loss" in n for n in report.notes)


def test_conflicts_and_what_is_left_alone():
    with pytest.raises(UsageError, match="rollout.prompts_per_step"):
        mapped("data.train_batch_size=16", "rollout.prompts_per_step=8")
    with pytest.raises(UsageError, match="both set rollout.max_new_tokens"):
        mapped("data.max_response_length=16", "actor_rollout_ref.rollout.response_length=32")
    cfg, report, _ = mapped(
        "data.train_batch_size=8",
        "rollout.prompts_per_step=8",
        *(f"{k}=2" for k in NOT_HERE),
        "trainer.mode=fully_async",
        "data.max_prompt_lenght=3",
    )
    # the resource keys are the resources table's (rewardhub_trainer.verl.resources: 2 nodes x 2 GPUs, one for
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


# ---- issue 27 §7 / issue 29 §2: the migration tells the truth ----------------------------------------------

import os  # noqa: E402

from rewardhub.config.loader import load_plan  # noqa: E402
from rewardhub.verl.keys import VERL_YAMLS  # noqa: E402
from rewardhub.verl.keys import derive_table  # noqa: E402
from rewardhub.verl.keys import is_verl_key  # noqa: E402
from rewardhub.verl.keys import key_table  # noqa: E402
from rewardhub_trainer.verl.rules import KEY_RULES  # noqa: E402

VERL = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".venv", "verl-compat", "verl"
)


def test_the_key_table_is_the_installed_verls():
    if not os.path.isdir(VERL):
        pytest.skip("verl is not installed for the tests (make install puts it in .venv/verl-compat)")
    from pathlib import Path

    texts = [Path(VERL, p).read_text(encoding="utf-8") for p in VERL_YAMLS]
    assert derive_table(texts) == key_table()


@pytest.mark.parametrize("key,value,meant", [
    ("actor_rollout_ref.rollout.nn", "8", "actor_rollout_ref.rollout.n"),
    ("actor_rollout_ref.actor.optim.lrr", "1e-6", "actor_rollout_ref.actor.optim.lr"),
    ("actor_rollout_ref.actr.ppo_epochs", "2", "actor_rollout_ref.actor.ppo_epochs"),
    ("algorithm.kl_ctrl.kl_coeff", "0.1", "algorithm.kl_ctrl.kl_coef"),
    ("actor_rollout_ref.model.enable_gradient_checkpoint", "True",
     "actor_rollout_ref.model.enable_gradient_checkpointing"),
    ("custom_reward_function.pth", "r.py", "custom_reward_function.path"),
    ("reward_model.reward_manger", "prime", "reward_model.reward_manager"),
    ("sandbox_fusion.urll", "http://h", "sandbox_fusion.url"),
    ("async_training.staleness_treshold", "0.5", "async_training.staleness_threshold"),
    ("actor_rollout_reff.rollout.n", "8", "actor_rollout_ref.rollout.n"),  # a misspelt section
    ("custom_reward_functon.path", "r.py", "custom_reward_function.path"),
    ("critic.optm.lr", "1e-5", "critic.optim.lr"),
])
def test_a_misspelt_verl_key_is_unknown_with_a_did_you_mean(key, value, meant):
    cfg, report, msgs = mapped(f"{key}={value}")
    assert report.unknown == [{"key": key, "value": report.unknown[0]["value"], "suggestion": meant}]
    assert not report.dropped and not report.moved  # never "dropped" with an invented reason
    assert not any(key in m for m in msgs)
    with pytest.raises(UsageError) as err:  # train and check refuse it
        load_plan(None, [f"{key}={value}", "reward.rewards=[{name:exact_match}]"])
    assert str(err.value).startswith(f"unknown key {key}") and f"did you mean {meant}?" in str(err.value)


def test_no_drop_reason_says_what_the_trainer_does_not_do():
    reasons = [a[1] for _, a in KEY_RULES if a[0] == "drop"]
    for false in (
        "every checkpoint is kept",
        "never deleted",
        "learner is one process",
        "GPU inference engine",
        "model-loading/FSDP",
    ):
        assert not [r for r in reasons if false in r], false
    _, report, _ = mapped(
        "actor_rollout_ref.model.lora_rank=64",
        "actor_rollout_ref.model.lora_alpha=32",
        "actor_rollout_ref.model.enable_gradient_checkpointing=True",
        "actor_rollout_ref.actor.fsdp_config.param_offload=True",
        "trainer.del_local_ckpt_after_load=True",
        "actor_rollout_ref.rollout.do_sample=True",
        "actor_rollout_ref.actor.policy_loss.loss_mode=gspo",
        "trainer.balance_batch=True",
    )
    why = {d["key"]: d["reason"] for d in report.dropped}
    assert "trains every weight" in why["actor_rollout_ref.model.lora_rank"]
    assert "no LoRA" in why["actor_rollout_ref.model.lora_alpha"]
    assert "no gradient checkpointing" in why["actor_rollout_ref.model.enable_gradient_checkpointing"]
    assert "trainer.num_learners" in why["actor_rollout_ref.actor.fsdp_config.param_offload"]
    assert "trainer.checkpoint_keep" in why["trainer.del_local_ckpt_after_load"]
    assert "always sample" in why["actor_rollout_ref.rollout.do_sample"]
    assert "gspo is not implemented" in why["actor_rollout_ref.actor.policy_loss.loss_mode"]
    assert "whole GRPO groups across trainer.num_learners" in why["trainer.balance_batch"]
    assert any("not LoRA adapters" in n for n in report.notes)


def test_checkpoints_kept_dual_clip_and_warmup_ratio_are_mapped():
    cfg, report, _ = mapped("trainer.max_actor_ckpt_to_keep=2", "actor_rollout_ref.actor.clip_ratio_c=2.5",
                            "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=0.1",
                            "trainer.total_training_steps=50", "actor_rollout_ref.actor.optim.clip_grad=0.5")
    assert cfg["trainer"]["checkpoint_keep"] == 2 and cfg["trainer"]["clip_ratio_c"] == 2.5
    assert cfg["trainer"]["lr_warmup_steps"] == 5 and cfg["trainer"]["max_grad_norm"] == 0.5
    _, report, _ = mapped("trainer.max_actor_ckpt_to_keep=null")
    assert "deletes older ones" in report.dropped[0]["reason"] and "3" in report.dropped[0]["reason"]


def test_the_trainer_accepts_clip_ratio_c():
    from rewardhub.config.fields import check_section
    from rewardhub_trainer.config import RULES
    from rewardhub_trainer.config import TrainerConfig

    assert (
        check_section({"clip_ratio_c": 3.0}, TrainerConfig, "trainer", RULES["trainer"])["clip_ratio_c"]
        == 3.0
    )


def test_verls_defaults_are_carried_over_or_listed():
    cfg, report, _ = mapped("actor_rollout_ref.model.path=/m", "data.train_batch_size=64",
                            "actor_rollout_ref.actor.ppo_mini_batch_size=16")
    assert cfg["trainer"]["loss_agg_mode"] == "token-mean" and cfg["trainer"]["weight_decay"] == 0.01
    notes = "\n".join(report.notes)
    assert "verl's default actor_rollout_ref.actor.loss_agg_mode='token-mean' is carried over" in notes
    assert "verl's default actor_rollout_ref.actor.optim.lr=1e-06, here trainer.lr=1e-05" in notes
    assert (
        "verl's default actor_rollout_ref.actor.optim.betas=[0.9, 0.999], here AdamW betas (0.9, 0.99)"
        in notes
    )
    mini = next(d for d in report.dropped if d["key"].endswith("ppo_mini_batch_size"))
    assert (
        "verl makes 4 optimizer step(s) per batch" in mini["reason"]
        and "the trainer makes 1" in mini["reason"]
    )
    # set by the config: neither carried nor listed
    cfg, report, _ = mapped(
        "actor_rollout_ref.model.path=/m",
        "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum",
        "trainer.weight_decay=0.0",
    )
    assert cfg["trainer"] == {
        "loss_agg_mode": "seq-mean-token-sum",
        "weight_decay": 0.0,
        "clip_ratio_c": 3.0,
    } or cfg["trainer"] == {"loss_agg_mode": "seq-mean-token-sum", "weight_decay": 0.0}
    assert not any("weight_decay" in n or "loss_agg_mode" in n for n in report.notes)


def test_verls_fully_async_keys():
    cfg, report, _ = mapped(
        "async_training.staleness_threshold=0.5",
        "async_training.trigger_parameter_sync_step=2",
        "async_training.partial_rollout=True",
        "actor_rollout_ref.actor.ppo_mini_batch_size=16",
        "data.train_batch_size=0",
        "async_training.require_batches=2",
        "async_training.use_dynamic_resource_scheduling=False",
    )
    assert cfg["trainer"]["mode"] == "fully_async" and cfg["trainer"]["sync_interval"] == 2
    assert cfg["trainer"]["staleness_limit"] == 2  # 2 - 1 + ceil(0.5 * 2)
    assert cfg["rollout"]["prompts_per_step"] == 32
    why = {d["key"]: d["reason"] for d in report.dropped}
    assert "never in the middle of a response" in why["async_training.partial_rollout"]
    assert "trainer.num_rollouters" in why["async_training.use_dynamic_resource_scheduling"]
    assert any("trainer.mode=fully_async" in n for n in report.notes)
    # verl's defaults when the section does not give them: sync every 4 steps, staleness 0.1
    cfg, report, _ = mapped("trainer.v1.trainer_mode=separate_async")
    assert (cfg["trainer"]["mode"], cfg["trainer"]["sync_interval"], cfg["trainer"]["staleness_limit"]) == \
        ("fully_async", 4, 4)


def test_a_misspelt_verl_only_name_under_data_or_trainer_is_unknown():
    import dataclasses

    from rewardhub_trainer.config import DataConfig
    from rewardhub_trainer.config import TrainerConfig

    _, report, _ = mapped("trainer.total_training_step=5", "data.train_batch_siz=4", "trainer.save_frq=3",
                          "data.train_file=x.parquet")
    assert {u["key"]: u["suggestion"] for u in report.unknown} == {
        "trainer.total_training_step": "trainer.total_training_steps",
        "data.train_batch_siz": "data.train_batch_size",
        # data.train_file: the trainer's schema names data.train_files
        "trainer.save_frq": "trainer.save_freq",
    }
    own = [f"trainer.{f.name}=1" for f in dataclasses.fields(TrainerConfig)] + \
        [f"data.{f.name}=1" for f in dataclasses.fields(DataConfig)]
    assert mapped(*own)[1].unknown == []  # the trainer's own keys are never taken for misspellings


def test_a_hydra_config_built_on_verls_own_config():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg, report = read_and_migrate(source={"defaults": ["fully_async_ppo_trainer", "_self_"],
                                               "async_training": {"trigger_parameter_sync_step": 3}})
    assert cfg["trainer"]["mode"] == "fully_async" and cfg["trainer"]["sync_interval"] == 3
    assert "verl's own base config" in report.dropped[0]["reason"] and "defaults" not in cfg
    with pytest.raises(UsageError, match="built on my_base, which is not read here"):
        read_and_migrate(source={"defaults": ["ppo_trainer", "my_base"]})


def test_fully_async_without_mini_batches_says_how_verl_would_size_a_step():
    cfg, report, _ = mapped("async_training.trigger_parameter_sync_step=1", "data.train_batch_size=8")
    assert cfg["rollout"]["prompts_per_step"] == 8 and cfg["trainer"]["staleness_limit"] == 1  # 0 + ceil(0.1)
    assert any("ppo_mini_batch_size (verl's default 256) x require_batches" in n for n in report.notes)


def test_the_defaults_table_says_the_trainers_and_verls_real_defaults():
    import dataclasses

    import yaml

    from rewardhub_trainer.config import DataConfig
    from rewardhub_trainer.config import RolloutConfig
    from rewardhub_trainer.config import TrainerConfig
    from rewardhub_trainer.verl.mapping import VERL_DEFAULTS

    ours = {
        f"{section}.{f.name}": f.default
        for section, cls in (("trainer", TrainerConfig), ("rollout", RolloutConfig), ("data", DataConfig))
        for f in dataclasses.fields(cls)
    }
    for _, _, key, here, _ in VERL_DEFAULTS:
        if key:
            assert ours[key] == here, key
    if os.path.isdir(VERL):
        from pathlib import Path

        from rewardhub.config.overrides import leaves

        verl = dict(leaves(yaml.safe_load(Path(VERL, VERL_YAMLS[0]).read_text(encoding="utf-8"))))
        for verl_key, value, *_ in VERL_DEFAULTS:
            assert verl[verl_key] == value, verl_key


def test_a_subtree_written_again_in_the_key_table_names_the_first_one():
    names = {f"a_rather_long_setting_name_{i}": i for i in range(6)}
    text = yaml.safe_dump({"actor": {"fsdp": {**names, "wrap": {"min_num_params": 0}}, "lr": 1},
                           "critic": {"fsdp": {**names, "wrap": {"min_num_params": 0}}}})
    table = derive_table([text])
    assert table.splitlines()[-1] == "critic.fsdp = actor.fsdp"
    assert "critic.fsdp.wrap" not in table
    # and the real table's copies are keys like the originals
    assert is_verl_key("critic.fsdp.wrap_policy.min_num_params") and is_verl_key("critic.optim.lr")
    assert not is_verl_key("critic.fsdp.wrap_policy.max_num_params")
