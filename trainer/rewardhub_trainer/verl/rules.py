"""verl's trainer keys -> the trainer's sections (``trainer``, ``model``, ``rollout``, ``data``).

:func:`rewardhub_trainer.verl.mapping.map_verl_keys` moves each verl key the table knows to the trainer's
key, or drops it with the reason, into the same :class:`MigrationReport` as the reward keys. Keys
spelled the same in verl and in the trainer (``data.train_files``, ``trainer.test_freq``...) are left as
they are (``total_epochs`` is dropped when ``total_training_steps`` is set). Under ``data.`` and
``trainer.`` only verl's own names are touched; everything under verl's own sections is accounted for.
The cluster-size keys (:data:`NOT_HERE`) are :mod:`.resources`'s.
"""

from __future__ import annotations

from rewardhub.verl.keys import Rule
from rewardhub.verl.keys import matches
from rewardhub.verl.keys import parse_rules

__all__ = ["NOT_HERE", "KEY_RULES", "SECTIONS", "VERL_ROOTS", "rule"]

#: the trainer's top-level sections
SECTIONS = ("trainer", "model", "rollout", "data", "resources")

#: left for the resource mapping (another table)
NOT_HERE = frozenset({"trainer.n_gpus_per_node", "trainer.nnodes",
                      "actor_rollout_ref.rollout.tensor_model_parallel_size"})
#: top-level sections that exist only in verl's config
VERL_ROOTS = ("actor_rollout_ref", "algorithm", "critic", "ray_init", "ray_kwargs", "global_profiler",
              "transfer_queue", "distillation", "skip", "hydra", "async_training")

#: the reasons that several rules give ($NAME in the table)
_REASONS = {
    "MODEL": (
        "a model-loading option of verl's workers (kernels, offload, config overrides); the trainer loads"
        " model.path with transformers as it is"
    ),
    "TEXT": "the trainer is text-only",
    "PROFILER": "verl's profiler has no meaning here",
    "SINGLE_TURN": "the trainer generates single-turn responses (no agent loop, no tool calls)",
    "WORKER": (
        "an implementation setting of verl's FSDP/Megatron workers (sharding, offload, kernels, padding);"
        " the trainer's learner is trainer.num_learners torch.distributed processes, each holding the "
        "whole model"
    ),
    "ENGINE": (
        "a setting of verl's rollout servers (vLLM/SGLang engine, scheduling, tracing) that the trainer's"
        " rollouters do not have"
    ),
    "VARIANT": (
        "a parameter of a verl policy-loss variant the trainer does not implement (its loss is PPO-clip)"
    ),
    "LOGPROB": (
        "verl recomputes log-probs in its own micro-batches; the trainer's learner uses "
        "trainer.micro_batch_size"
    ),
    "TOKENS": "the learner's micro-batches hold trainer.micro_batch_size samples (no packing by token count)",
}

#: pattern -> action (:func:`rewardhub.verl.keys.parse_rules`), first match wins; a key under data./trainer.
#: that matches nothing is left for the trainer's schema; a key under verl's own sections that verl does not
#: have either is an unknown key (a misspelling), not a drop
KEY_RULES: list[Rule] = parse_rules(
    """\
data.train_batch_size -> rollout.prompts_per_step
data.max_response_length -> rollout.max_new_tokens
data.val_batch_size: evaluation generates the whole validation set, 32 prompts a call
data.gen_batch_size: the trainer generates rollout.prompts_per_step prompts a step (no over-generation to \
filter from)
data.shuffle: the trainer always shuffles, with data.seed, every epoch
data.validation_shuffle: evaluation reads the validation set in order
data.return_raw_chat: verl's dataloader output format; the trainer renders prompts itself
data.return_raw_input_ids: verl's dataloader output format; the trainer renders prompts itself
data.return_full_prompt: verl's dataloader output format; the trainer renders prompts itself
data.return_multi_modal_inputs: $TEXT
data.image_key: $TEXT
data.video_key: $TEXT
data.audio_key: $TEXT
data.image_patch_size: $TEXT
data.mm_processor_kwargs.*: $TEXT
data.tokenizer: the model's own tokenizer is used
data.use_shm: the data is read by the driver from local files
data.trust_remote_code: the data is read with pyarrow/datasets, no remote code
data.dataloader_num_workers: the driver reads the data in one process
data.filter_overlong_prompts_workers: the driver reads the data in one process
data.train_max_samples: the trainer reads every row of data.train_files (no cap on the rows)
data.val_max_samples: evaluation reads every row of data.val_files (no cap on the rows)
data.reward_fn_key: rewards get data_source from each row (reward.rewards decides who scores)
data.apply_chat_template_kwargs.*: the chat template is applied with its defaults
data.custom_cls.*: verl dataset classes do not run here; give JSONL/parquet/save_to_disk data
data.sampler.*: verl samplers do not run here; the trainer shuffles with data.seed
data.datagen.*: verl's dynamic data generation does not run here
data.tool_config_path: $SINGLE_TURN
data.function_tool_path: $SINGLE_TURN
actor_rollout_ref.model.path -> model.path
actor_rollout_ref.model.enable_gradient_checkpointing: the learner keeps the activations for the backward \
pass (no gradient checkpointing); lower trainer.micro_batch_size to use less memory
actor_rollout_ref.model.lora_rank (lora)
actor_rollout_ref.model.lora.rank (lora)
actor_rollout_ref.model.lora_alpha: no LoRA: the trainer trains every weight of the model
actor_rollout_ref.model.target_modules: no LoRA: the trainer trains every weight of the model
actor_rollout_ref.model.exclude_modules: no LoRA: the trainer trains every weight of the model
actor_rollout_ref.model.lora_adapter_path: no LoRA: the trainer trains every weight of the model and loads \
no adapter
actor_rollout_ref.model.lora.*: no LoRA: the trainer trains every weight of the model
actor_rollout_ref.model.trust_remote_code: the trainer loads the model without remote code (transformers' \
own architectures)
actor_rollout_ref.model.tokenizer_path: the tokenizer of model.path is used
actor_rollout_ref.model.custom_chat_template: the tokenizer's own chat template is used
actor_rollout_ref.model.*: $MODEL
actor_rollout_ref.actor.optim.lr -> trainer.lr
actor_rollout_ref.actor.optim.weight_decay -> trainer.weight_decay
actor_rollout_ref.actor.optim.lr_warmup_steps (warmup)
actor_rollout_ref.actor.optim.lr_warmup_steps_ratio (warmup)
actor_rollout_ref.actor.optim.warmup_style -> trainer.lr_schedule
actor_rollout_ref.actor.optim.lr_scheduler_type -> trainer.lr_schedule
actor_rollout_ref.actor.optim.min_lr_ratio -> trainer.min_lr_ratio
actor_rollout_ref.actor.optim.clip_grad -> trainer.max_grad_norm
actor_rollout_ref.actor.optim.betas: the trainer's AdamW uses betas (0.9, 0.99)
actor_rollout_ref.actor.optim.total_training_steps: the LR schedule spans trainer.total_steps
actor_rollout_ref.actor.optim.num_cycles: the cosine schedule decays once, to min_lr_ratio
actor_rollout_ref.actor.optim.*: an optimizer setting the trainer does not have (it uses torch AdamW, betas \
0.9/0.99)
actor_rollout_ref.actor.grad_clip -> trainer.max_grad_norm
actor_rollout_ref.actor.ppo_epochs -> trainer.ppo_epochs
actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu -> trainer.micro_batch_size
actor_rollout_ref.actor.ppo_micro_batch_size -> trainer.micro_batch_size
actor_rollout_ref.actor.ppo_mini_batch_size (mini)
actor_rollout_ref.actor.clip_ratio -> trainer.clip_eps
actor_rollout_ref.actor.clip_ratio_low: the clip range is symmetric, 1 +- trainer.clip_eps (clip_ratio); no \
separate low/high bounds
actor_rollout_ref.actor.clip_ratio_high: the clip range is symmetric, 1 +- trainer.clip_eps (clip_ratio); no \
separate low/high bounds
actor_rollout_ref.actor.clip_ratio_c -> trainer.clip_ratio_c
actor_rollout_ref.actor.use_kl_loss (kl)
actor_rollout_ref.actor.kl_loss_coef (kl)
actor_rollout_ref.actor.kl_loss_type: the KL term is the k3 estimator, verl's low_var_kl (clamped to \
[-10, 10] as verl clamps it); no other estimator
actor_rollout_ref.actor.entropy_coeff -> trainer.entropy_coeff
actor_rollout_ref.actor.loss_agg_mode -> trainer.loss_agg_mode
actor_rollout_ref.actor.policy_loss.loss_mode (loss_mode)
actor_rollout_ref.actor.policy_loss.*: $VARIANT
actor_rollout_ref.actor.tau_pos: $VARIANT
actor_rollout_ref.actor.tau_neg: $VARIANT
actor_rollout_ref.actor.loss_scale_factor: it scales verl's seq-mean-token-sum-norm aggregation, which the \
trainer does not have
actor_rollout_ref.actor.use_dynamic_bsz: $TOKENS
actor_rollout_ref.actor.ppo_max_token_len_per_gpu: $TOKENS
actor_rollout_ref.actor.shuffle: one optimizer step per batch and PPO epoch: the order of the samples does \
not change the update
actor_rollout_ref.actor.data_loader_seed: one optimizer step per batch and PPO epoch: the order of the \
samples does not change the update
actor_rollout_ref.actor.calculate_entropy: the learner always logs the entropy
actor_rollout_ref.actor.calculate_sum_pi_squared: a metric of verl's actor the trainer does not log
actor_rollout_ref.actor.checkpoint.*: what verl's checkpoints hold; the trainer's hold the model, the \
optimizer and the run state
actor_rollout_ref.actor.profiler.*: $PROFILER
actor_rollout_ref.actor.use_rollout_log_probs: the PPO ratio is always taken against the rollouters' \
log-probs
actor_rollout_ref.actor.*: $WORKER
actor_rollout_ref.rollout.n -> rollout.n
actor_rollout_ref.rollout.temperature -> rollout.temperature
actor_rollout_ref.rollout.top_p -> rollout.top_p
actor_rollout_ref.rollout.top_k -> rollout.top_k
actor_rollout_ref.rollout.stop -> rollout.stop
actor_rollout_ref.rollout.stop_token_ids -> rollout.stop_token_ids
actor_rollout_ref.rollout.name (engine)
actor_rollout_ref.rollout.response_length -> rollout.max_new_tokens
actor_rollout_ref.rollout.max_model_len -> rollout.max_model_len
actor_rollout_ref.rollout.gpu_memory_utilization -> rollout.gpu_memory_utilization
actor_rollout_ref.rollout.enforce_eager -> rollout.enforce_eager
actor_rollout_ref.rollout.prompt_length: the prompt limit here is data.max_prompt_length
actor_rollout_ref.rollout.do_sample: the rollouters always sample (GRPO), at rollout.temperature
actor_rollout_ref.rollout.calculate_log_probs: the rollouters always record the sampling log-probs
actor_rollout_ref.rollout.ignore_eos: a response ends at end-of-sequence (or rollout.stop)
actor_rollout_ref.rollout.mode: verl's rollout server mode; the rollouters are Ray actors (trainer.mode \
picks sync or fully_async training)
actor_rollout_ref.rollout.multi_turn.*: $SINGLE_TURN
actor_rollout_ref.rollout.agent.*: $SINGLE_TURN
actor_rollout_ref.rollout.log_prob_*: $LOGPROB
actor_rollout_ref.rollout.val_kwargs.n -> rollout.val_n
actor_rollout_ref.rollout.val_kwargs.temperature (val_temperature)
actor_rollout_ref.rollout.val_kwargs.do_sample (val_temperature)
actor_rollout_ref.rollout.val_kwargs.*: evaluation samples with val_kwargs.n and temperature only
actor_rollout_ref.rollout.*: $ENGINE
actor_rollout_ref.ref.log_prob_*: $LOGPROB
actor_rollout_ref.ref.*: the reference policy is the learner's starting weights (used when trainer.kl_coef > \
0); verl's ref worker settings have no meaning here
actor_rollout_ref.hybrid_engine: the trainer's rollouters and learner are separate processes
actor_rollout_ref.*: $WORKER
algorithm.adv_estimator (adv)
algorithm.norm_adv_by_std_in_grpo -> trainer.scale_advantages
algorithm.use_kl_in_reward (kl)
algorithm.kl_ctrl.kl_coef (kl)
algorithm.kl_ctrl.*: the KL coefficient is fixed (no adaptive controller)
algorithm.kl_penalty: verl's estimator for a KL penalty in the reward; the KL term here is in the loss, the \
k3 estimator
algorithm.gamma: GRPO's advantages are per response (no discounting)
algorithm.lam: GRPO's advantages are per response (no GAE)
algorithm.filter_groups.*: DAPO's dynamic sampling (generating more until the groups with mixed rewards fill \
the batch) is not implemented; a group whose rewards are all equal gets zero advantage
algorithm.rollout_correction.*: verl's importance-sampling correction is not implemented; the PPO ratio is \
taken against the rollouters' log-probs
algorithm.*: a verl algorithm setting the trainer does not implement
critic.*: GRPO has no critic
ray_init.*: the trainer starts Ray itself (or joins RAY_ADDRESS)
ray_kwargs.*: the trainer starts Ray itself (or joins RAY_ADDRESS)
global_profiler.*: $PROFILER
transfer_queue.*: verl's transfer queue has no meaning here
distillation.*: the trainer has no distillation from a teacher model
skip.*: verl's step-skipping debug switches have no meaning here
hydra.*: Hydra's own settings (run folders, logging); the trainer does not run under Hydra
async_training.* (async)
rollout.nnodes (async)
rollout.n_gpus_per_node (async)
rollout.total_rollout_steps (async)
trainer.total_training_steps -> trainer.total_steps
trainer.total_epochs (epochs)
trainer.save_freq (save)
trainer.default_hdfs_dir: checkpoints are written to the run folder only
trainer.critic_warmup: GRPO has no critic
trainer.resume_mode: resume with `rewardhub train ... --resume DIR`
trainer.resume_from_path: resume with `rewardhub train ... --resume DIR`
trainer.log_val_generations: evaluation logs scores, not generations
trainer.val_generations_to_log_to_wandb: evaluation logs scores, not generations
trainer.val_only: the trainer always trains
trainer.balance_batch: verl balances sequence lengths across its ranks; the trainer splits a batch by whole \
GRPO groups across trainer.num_learners
trainer.use_legacy_worker_impl: verl's worker implementation has no meaning here
trainer.use_v1: which of verl's trainer implementations runs; no meaning here
trainer.v1.trainer_mode (async)
trainer.v1.separate_async.parameter_sync_step (async)
trainer.v1.*: a setting of verl's v1 trainer modes the trainer does not have
trainer.checkpoint_callback_class: verl checkpoint callbacks do not run here
trainer.ray_wait_register_center_timeout: verl's worker registration has no meaning here
trainer.max_actor_ckpt_to_keep (keep)
trainer.max_critic_ckpt_to_keep: GRPO has no critic
trainer.del_local_ckpt_after_load: the checkpoint a run resumes from is kept; it is removed only once \
trainer.checkpoint_keep newer ones are complete
trainer.esi_redundant_time: verl's elastic-instance setting has no meaning here
trainer.rollout_data_dir: the trainer does not dump rollouts
trainer.validation_data_dir: the trainer does not dump validation generations
trainer.profile_steps: $PROFILER
trainer.profile_continuous_steps: $PROFILER
trainer.val_before_train_only: the trainer always trains
""",
    **_REASONS,
)


def rule(key: str) -> tuple[str, ...] | None:
    if key in NOT_HERE:
        return None
    return next((action for pattern, action in KEY_RULES if matches(pattern, key)), None)
