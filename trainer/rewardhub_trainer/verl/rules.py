"""verl's trainer keys -> the trainer's sections (``trainer``, ``model``, ``rollout``, ``data``).

A verl GRPO launch script (``python3 -m verl.trainer.main_ppo data.train_files=... actor_rollout_ref...``)
runs with ``rewardhub train``: :func:`rewardhub_trainer.verl.mapping.map_verl_keys`, called by the shim after
the reward keys, moves each verl key it knows to the trainer's key, or drops it with the reason (FSDP,
GPU-engine and logging settings the trainer does not have), into the same :class:`MigrationReport` as the
reward keys, with one :class:`~rewardhub.RewardhubDeprecationWarning` each. Keys spelled the same in verl and
in the trainer (``data.train_files``, ``data.val_files``, ``data.prompt_key``,
``data.max_prompt_length``, ``data.filter_overlong_prompts``, ``data.truncation``,
``trainer.test_freq``, ``trainer.val_before_train``, ``trainer.total_epochs``, ``trainer.default_local_dir``,
``trainer.device``)
are left as they are (``total_epochs`` is dropped when ``total_training_steps`` is set: that one wins).
Under ``data.`` and ``trainer.`` only verl's own names are touched (anything else is the trainer's to
validate); everything under ``actor_rollout_ref.``, ``algorithm.``, ``critic.``, ``ray_init.``... is
accounted for. ``trainer.n_gpus_per_node``, ``trainer.nnodes`` and
``actor_rollout_ref.rollout.tensor_model_parallel_size`` are not handled here (:mod:`.verl_resources`
maps them; the last one onto ``rollout.tensor_parallel_size`` and ``resources.rollouter.num_gpus``).
"""

from __future__ import annotations

from ._actor_rules import ACTOR_ROLLOUT_RULES
from ._actor_rules import PROFILER as _PROFILER
from ._actor_rules import SINGLE_TURN as _SINGLE_TURN

__all__ = ["NOT_HERE", "KEY_RULES", "SECTIONS", "VERL_ROOTS", "rule"]

#: the trainer's top-level sections
SECTIONS = ("trainer", "model", "rollout", "data", "resources")

#: left for the resource mapping (another table)
NOT_HERE = frozenset({"trainer.n_gpus_per_node", "trainer.nnodes",
                      "actor_rollout_ref.rollout.tensor_model_parallel_size"})
#: top-level sections that exist only in verl's config
VERL_ROOTS = ("actor_rollout_ref", "algorithm", "critic", "ray_init", "ray_kwargs", "global_profiler",
              "transfer_queue", "distillation", "skip", "hydra", "async_training")

_MODEL = ("a model-loading option of verl's workers (kernels, offload, config overrides); the trainer loads "
          "model.path with transformers as it is")
_TEXT = "the trainer is text-only"

# pattern (dotted, "*" = this key and everything under it) -> ("move", new key) | ("drop", reason)
# | (special,); first match wins; a key under data./trainer. that matches nothing is left for the trainer's
# schema; a key under verl's own sections that verl does not have either is an unknown key (a misspelling),
# not a drop
KEY_RULES: list[tuple[str, tuple[str, ...]]] = [
    # data
    ("data.train_batch_size", ("move", "rollout.prompts_per_step")),
    ("data.max_response_length", ("move", "rollout.max_new_tokens")),
    ("data.val_batch_size", ("drop", "evaluation generates the whole validation set, 32 prompts a call")),
    (
        "data.gen_batch_size",
        (
            "drop",
            "the trainer generates rollout.prompts_per_step prompts a step (no "
            "over-generation to filter from)",
        ),
    ),
    ("data.shuffle", ("drop", "the trainer always shuffles, with data.seed, every epoch")),
    ("data.validation_shuffle", ("drop", "evaluation reads the validation set in order")),
    ("data.return_raw_chat", ("drop", "verl's dataloader output format; the trainer renders prompts itself")),
    (
        "data.return_raw_input_ids",
        ("drop", "verl's dataloader output format; the trainer renders prompts itself"),
    ),
    (
        "data.return_full_prompt",
        ("drop", "verl's dataloader output format; the trainer renders prompts itself"),
    ),
    ("data.return_multi_modal_inputs", ("drop", _TEXT)),
    ("data.image_key", ("drop", _TEXT)),
    ("data.video_key", ("drop", _TEXT)),
    ("data.audio_key", ("drop", _TEXT)),
    ("data.image_patch_size", ("drop", _TEXT)),
    ("data.mm_processor_kwargs.*", ("drop", _TEXT)),
    ("data.tokenizer", ("drop", "the model's own tokenizer is used")),
    ("data.use_shm", ("drop", "the data is read by the driver from local files")),
    ("data.trust_remote_code", ("drop", "the data is read with pyarrow/datasets, no remote code")),
    ("data.dataloader_num_workers", ("drop", "the driver reads the data in one process")),
    ("data.filter_overlong_prompts_workers", ("drop", "the driver reads the data in one process")),
    (
        "data.train_max_samples",
        ("drop", "the trainer reads every row of data.train_files (no cap on the rows)"),
    ),
    ("data.val_max_samples", ("drop", "evaluation reads every row of data.val_files (no cap on the rows)")),
    (
        "data.reward_fn_key",
        ("drop", "rewards get data_source from each row (reward.rewards decides who scores)"),
    ),
    ("data.apply_chat_template_kwargs.*", ("drop", "the chat template is applied with its defaults")),
    (
        "data.custom_cls.*",
        ("drop", "verl dataset classes do not run here; give JSONL/parquet/save_to_disk data"),
    ),
    ("data.sampler.*", ("drop", "verl samplers do not run here; the trainer shuffles with data.seed")),
    ("data.datagen.*", ("drop", "verl's dynamic data generation does not run here")),
    ("data.tool_config_path", ("drop", _SINGLE_TURN)),
    ("data.function_tool_path", ("drop", _SINGLE_TURN)),
    # the model
    ("actor_rollout_ref.model.path", ("move", "model.path")),
    (
        "actor_rollout_ref.model.enable_gradient_checkpointing",
        (
            "drop",
            "the learner keeps the activations for "
            "the backward pass (no gradient "
            "checkpointing); lower "
            "trainer.micro_batch_size to use less memory",
        ),
    ),
    ("actor_rollout_ref.model.lora_rank", ("lora",)),
    ("actor_rollout_ref.model.lora.rank", ("lora",)),
    ("actor_rollout_ref.model.lora_alpha", ("drop", "no LoRA: the trainer trains every weight of the model")),
    (
        "actor_rollout_ref.model.target_modules",
        ("drop", "no LoRA: the trainer trains every weight of the model"),
    ),
    (
        "actor_rollout_ref.model.exclude_modules",
        ("drop", "no LoRA: the trainer trains every weight of the model"),
    ),
    (
        "actor_rollout_ref.model.lora_adapter_path",
        ("drop", "no LoRA: the trainer trains every weight of the model and loads no adapter"),
    ),
    ("actor_rollout_ref.model.lora.*", ("drop", "no LoRA: the trainer trains every weight of the model")),
    (
        "actor_rollout_ref.model.trust_remote_code",
        ("drop", "the trainer loads the model without remote code (transformers' own architectures)"),
    ),
    ("actor_rollout_ref.model.tokenizer_path", ("drop", "the tokenizer of model.path is used")),
    ("actor_rollout_ref.model.custom_chat_template", ("drop", "the tokenizer's own chat template is used")),
    ("actor_rollout_ref.model.*", ("drop", _MODEL)),
    *ACTOR_ROLLOUT_RULES,
    # the algorithm
    ("algorithm.adv_estimator", ("adv",)),
    ("algorithm.norm_adv_by_std_in_grpo", ("move", "trainer.scale_advantages")),
    ("algorithm.use_kl_in_reward", ("kl",)),
    ("algorithm.kl_ctrl.kl_coef", ("kl",)),
    ("algorithm.kl_ctrl.*", ("drop", "the KL coefficient is fixed (no adaptive controller)")),
    (
        "algorithm.kl_penalty",
        (
            "drop",
            "verl's estimator for a KL penalty in the reward; the KL term here is in the "
            "loss, the k3 estimator",
        ),
    ),
    ("algorithm.gamma", ("drop", "GRPO's advantages are per response (no discounting)")),
    ("algorithm.lam", ("drop", "GRPO's advantages are per response (no GAE)")),
    (
        "algorithm.filter_groups.*",
        (
            "drop",
            "DAPO's dynamic sampling (generating more until the groups with mixed "
            "rewards fill the batch) is not implemented; a group whose rewards are "
            "all equal gets zero advantage",
        ),
    ),
    (
        "algorithm.rollout_correction.*",
        (
            "drop",
            "verl's importance-sampling correction is not implemented; the PPO "
            "ratio is taken against the rollouters' log-probs",
        ),
    ),
    ("algorithm.*", ("drop", "a verl algorithm setting the trainer does not implement")),
    ("critic.*", ("drop", "GRPO has no critic")),
    ("ray_init.*", ("drop", "the trainer starts Ray itself (or joins RAY_ADDRESS)")),
    ("ray_kwargs.*", ("drop", "the trainer starts Ray itself (or joins RAY_ADDRESS)")),
    ("global_profiler.*", ("drop", _PROFILER)),
    ("transfer_queue.*", ("drop", "verl's transfer queue has no meaning here")),
    ("distillation.*", ("drop", "the trainer has no distillation from a teacher model")),
    ("skip.*", ("drop", "verl's step-skipping debug switches have no meaning here")),
    (
        "hydra.*",
        ("drop", "Hydra's own settings (run folders, logging); the trainer does not run under Hydra"),
    ),
    # the fully-async entry point (verl_async.py decides with the whole config)
    ("async_training.*", ("async",)),
    ("rollout.nnodes", ("async",)),
    ("rollout.n_gpus_per_node", ("async",)),
    ("rollout.total_rollout_steps", ("async",)),
    # the trainer
    ("trainer.total_training_steps", ("move", "trainer.total_steps")),
    ("trainer.total_epochs", ("epochs",)),
    ("trainer.save_freq", ("save",)),
    ("trainer.default_hdfs_dir", ("drop", "checkpoints are written to the run folder only")),
    ("trainer.critic_warmup", ("drop", "GRPO has no critic")),
    ("trainer.resume_mode", ("drop", "resume with `rewardhub train ... --resume DIR`")),
    ("trainer.resume_from_path", ("drop", "resume with `rewardhub train ... --resume DIR`")),
    ("trainer.log_val_generations", ("drop", "evaluation logs scores, not generations")),
    ("trainer.val_generations_to_log_to_wandb", ("drop", "evaluation logs scores, not generations")),
    ("trainer.val_only", ("drop", "the trainer always trains")),
    (
        "trainer.balance_batch",
        (
            "drop",
            "verl balances sequence lengths across its ranks; the trainer splits a "
            "batch by whole GRPO groups across trainer.num_learners",
        ),
    ),
    ("trainer.use_legacy_worker_impl", ("drop", "verl's worker implementation has no meaning here")),
    ("trainer.use_v1", ("drop", "which of verl's trainer implementations runs; no meaning here")),
    ("trainer.v1.trainer_mode", ("async",)),
    ("trainer.v1.separate_async.parameter_sync_step", ("async",)),
    ("trainer.v1.*", ("drop", "a setting of verl's v1 trainer modes the trainer does not have")),
    ("trainer.checkpoint_callback_class", ("drop", "verl checkpoint callbacks do not run here")),
    ("trainer.ray_wait_register_center_timeout", ("drop", "verl's worker registration has no meaning here")),
    ("trainer.max_actor_ckpt_to_keep", ("keep",)),
    ("trainer.max_critic_ckpt_to_keep", ("drop", "GRPO has no critic")),
    (
        "trainer.del_local_ckpt_after_load",
        (
            "drop",
            "the checkpoint a run resumes from is kept; it is removed only "
            "once trainer.checkpoint_keep newer ones are complete",
        ),
    ),
    ("trainer.esi_redundant_time", ("drop", "verl's elastic-instance setting has no meaning here")),
    ("trainer.rollout_data_dir", ("drop", "the trainer does not dump rollouts")),
    ("trainer.validation_data_dir", ("drop", "the trainer does not dump validation generations")),
    ("trainer.profile_steps", ("drop", _PROFILER)),
    ("trainer.profile_continuous_steps", ("drop", _PROFILER)),
    ("trainer.val_before_train_only", ("drop", "the trainer always trains")),
]

_ENGINES = {"vllm": "vllm", "hf": "transformers", "transformers": "transformers"}


def _match(pattern: str, key: str) -> bool:
    if pattern.endswith("_*"):  # a name prefix: log_prob_*
        return key.startswith(pattern[:-1])
    if pattern.endswith(".*"):
        head = pattern[:-2]
        return key == head or key.startswith(head + ".")
    return key == pattern


def rule(key: str) -> tuple[str, ...] | None:
    if key in NOT_HERE:
        return None
    for pattern, action in KEY_RULES:
        if _match(pattern, key):
            return action
    return None
