"""verl's ``actor_rollout_ref`` keys past the model's -> the trainer's keys, or why they are dropped.

The part of :data:`rewardhub_trainer.verl.rules.KEY_RULES` (same format, spliced in at its place: the
first match wins) for verl's actor (the learner), its rollout (the generation engine), its ref worker and
the rest of that section, with the reasons of their drops.
"""

from __future__ import annotations

__all__ = ["ACTOR_ROLLOUT_RULES", "PROFILER", "SINGLE_TURN"]

PROFILER = "verl's profiler has no meaning here"
SINGLE_TURN = "the trainer generates single-turn responses (no agent loop, no tool calls)"

_WORKER = (
    "an implementation setting of verl's FSDP/Megatron workers (sharding, offload, kernels, padding); the "
    "trainer's learner is trainer.num_learners torch.distributed processes, each holding the whole model"
)
_ENGINE = ("a setting of verl's rollout servers (vLLM/SGLang engine, scheduling, tracing) that the trainer's "
           "rollouters do not have")
_VARIANT = "a parameter of a verl policy-loss variant the trainer does not implement (its loss is PPO-clip)"
_LOGPROB = ("verl recomputes log-probs in its own micro-batches; the trainer's learner uses "
            "trainer.micro_batch_size")
_TOKENS = "the learner's micro-batches hold trainer.micro_batch_size samples (no packing by token count)"

ACTOR_ROLLOUT_RULES: list[tuple[str, tuple[str, ...]]] = [
    # the actor (learner)
    ("actor_rollout_ref.actor.optim.lr", ("move", "trainer.lr")),
    ("actor_rollout_ref.actor.optim.weight_decay", ("move", "trainer.weight_decay")),
    ("actor_rollout_ref.actor.optim.lr_warmup_steps", ("warmup",)),
    ("actor_rollout_ref.actor.optim.lr_warmup_steps_ratio", ("warmup",)),
    ("actor_rollout_ref.actor.optim.warmup_style", ("move", "trainer.lr_schedule")),
    ("actor_rollout_ref.actor.optim.lr_scheduler_type", ("move", "trainer.lr_schedule")),
    ("actor_rollout_ref.actor.optim.min_lr_ratio", ("move", "trainer.min_lr_ratio")),
    ("actor_rollout_ref.actor.optim.clip_grad", ("move", "trainer.max_grad_norm")),
    ("actor_rollout_ref.actor.optim.betas", ("drop", "the trainer's AdamW uses betas (0.9, 0.99)")),
    (
        "actor_rollout_ref.actor.optim.total_training_steps",
        ("drop", "the LR schedule spans trainer.total_steps"),
    ),
    (
        "actor_rollout_ref.actor.optim.num_cycles",
        ("drop", "the cosine schedule decays once, to min_lr_ratio"),
    ),
    (
        "actor_rollout_ref.actor.optim.*",
        ("drop", "an optimizer setting the trainer does not have (it uses torch AdamW, betas 0.9/0.99)"),
    ),
    ("actor_rollout_ref.actor.grad_clip", ("move", "trainer.max_grad_norm")),
    ("actor_rollout_ref.actor.ppo_epochs", ("move", "trainer.ppo_epochs")),
    ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", ("move", "trainer.micro_batch_size")),
    ("actor_rollout_ref.actor.ppo_micro_batch_size", ("move", "trainer.micro_batch_size")),
    ("actor_rollout_ref.actor.ppo_mini_batch_size", ("mini",)),
    ("actor_rollout_ref.actor.clip_ratio", ("move", "trainer.clip_eps")),
    (
        "actor_rollout_ref.actor.clip_ratio_low",
        (
            "drop",
            "the clip range is symmetric, 1 +- trainer.clip_eps (clip_ratio); no separate low/high bounds",
        ),
    ),
    (
        "actor_rollout_ref.actor.clip_ratio_high",
        (
            "drop",
            "the clip range is symmetric, 1 +- trainer.clip_eps (clip_ratio); no separate low/high bounds",
        ),
    ),
    ("actor_rollout_ref.actor.clip_ratio_c", ("move", "trainer.clip_ratio_c")),
    ("actor_rollout_ref.actor.use_kl_loss", ("kl",)),
    ("actor_rollout_ref.actor.kl_loss_coef", ("kl",)),
    (
        "actor_rollout_ref.actor.kl_loss_type",
        ("drop", "the KL term is the k3 estimator (verl's low_var_kl without the clamp)"),
    ),
    ("actor_rollout_ref.actor.entropy_coeff", ("move", "trainer.entropy_coeff")),
    ("actor_rollout_ref.actor.loss_agg_mode", ("move", "trainer.loss_agg_mode")),
    ("actor_rollout_ref.actor.policy_loss.loss_mode", ("loss_mode",)),
    ("actor_rollout_ref.actor.policy_loss.*", ("drop", _VARIANT)),
    ("actor_rollout_ref.actor.tau_pos", ("drop", _VARIANT)),
    ("actor_rollout_ref.actor.tau_neg", ("drop", _VARIANT)),
    (
        "actor_rollout_ref.actor.loss_scale_factor",
        ("drop", "it scales verl's seq-mean-token-sum-norm aggregation, which the trainer does not have"),
    ),
    ("actor_rollout_ref.actor.use_dynamic_bsz", ("drop", _TOKENS)),
    ("actor_rollout_ref.actor.ppo_max_token_len_per_gpu", ("drop", _TOKENS)),
    (
        "actor_rollout_ref.actor.shuffle",
        (
            "drop",
            "one optimizer step per batch and PPO epoch: the order of the samples does not change the update",
        ),
    ),
    (
        "actor_rollout_ref.actor.data_loader_seed",
        (
            "drop",
            "one optimizer step per batch and PPO epoch: the order of the samples does not change the update",
        ),
    ),
    ("actor_rollout_ref.actor.calculate_entropy", ("drop", "the learner always logs the entropy")),
    (
        "actor_rollout_ref.actor.calculate_sum_pi_squared",
        ("drop", "a metric of verl's actor the trainer does not log"),
    ),
    (
        "actor_rollout_ref.actor.checkpoint.*",
        (
            "drop",
            "what verl's checkpoints hold; the trainer's hold the model, the optimizer and the run state",
        ),
    ),
    ("actor_rollout_ref.actor.profiler.*", ("drop", PROFILER)),
    (
        "actor_rollout_ref.actor.use_rollout_log_probs",
        ("drop", "the PPO ratio is always taken against the rollouters' log-probs"),
    ),
    ("actor_rollout_ref.actor.*", ("drop", _WORKER)),
    # the rollout
    ("actor_rollout_ref.rollout.n", ("move", "rollout.n")),
    ("actor_rollout_ref.rollout.temperature", ("move", "rollout.temperature")),
    ("actor_rollout_ref.rollout.top_p", ("move", "rollout.top_p")),
    ("actor_rollout_ref.rollout.top_k", ("move", "rollout.top_k")),
    ("actor_rollout_ref.rollout.stop", ("move", "rollout.stop")),
    ("actor_rollout_ref.rollout.stop_token_ids", ("move", "rollout.stop_token_ids")),
    ("actor_rollout_ref.rollout.name", ("engine",)),
    ("actor_rollout_ref.rollout.response_length", ("move", "rollout.max_new_tokens")),
    ("actor_rollout_ref.rollout.max_model_len", ("move", "rollout.max_model_len")),
    ("actor_rollout_ref.rollout.gpu_memory_utilization", ("move", "rollout.gpu_memory_utilization")),
    ("actor_rollout_ref.rollout.enforce_eager", ("move", "rollout.enforce_eager")),
    ("actor_rollout_ref.rollout.prompt_length", ("drop", "the prompt limit here is data.max_prompt_length")),
    (
        "actor_rollout_ref.rollout.do_sample",
        ("drop", "the rollouters always sample (GRPO), at rollout.temperature"),
    ),
    (
        "actor_rollout_ref.rollout.calculate_log_probs",
        ("drop", "the rollouters always record the sampling log-probs"),
    ),
    (
        "actor_rollout_ref.rollout.ignore_eos",
        ("drop", "a response ends at end-of-sequence (or rollout.stop)"),
    ),
    (
        "actor_rollout_ref.rollout.mode",
        (
            "drop",
            "verl's rollout server mode; the rollouters are Ray actors "
            "(trainer.mode picks sync or fully_async training)",
        ),
    ),
    ("actor_rollout_ref.rollout.multi_turn.*", ("drop", SINGLE_TURN)),
    ("actor_rollout_ref.rollout.agent.*", ("drop", SINGLE_TURN)),
    ("actor_rollout_ref.rollout.log_prob_*", ("drop", _LOGPROB)),
    ("actor_rollout_ref.rollout.val_kwargs.n", ("move", "rollout.val_n")),
    ("actor_rollout_ref.rollout.val_kwargs.temperature", ("val_temperature",)),
    ("actor_rollout_ref.rollout.val_kwargs.do_sample", ("val_temperature",)),
    (
        "actor_rollout_ref.rollout.val_kwargs.*",
        ("drop", "evaluation samples with val_kwargs.n and temperature only"),
    ),
    ("actor_rollout_ref.rollout.*", ("drop", _ENGINE)),
    ("actor_rollout_ref.ref.log_prob_*", ("drop", _LOGPROB)),
    (
        "actor_rollout_ref.ref.*",
        (
            "drop",
            "the reference policy is the learner's starting weights (used when "
            "trainer.kl_coef > 0); verl's ref worker settings have no meaning here",
        ),
    ),
    (
        "actor_rollout_ref.hybrid_engine",
        ("drop", "the trainer's rollouters and learner are separate processes"),
    ),
    ("actor_rollout_ref.*", ("drop", _WORKER)),
]
