"""verl's trainer keys -> the trainer's sections (``trainer``, ``model``, ``rollout``, ``data``).

A verl GRPO launch script (``python3 -m verl.trainer.main_ppo data.train_files=... actor_rollout_ref...``)
runs with ``rewardhub train``: :func:`map_verl_keys`, called by the shim after the reward keys, moves
each verl key it knows to the trainer's key, or drops it with the reason (FSDP, GPU-engine and
logging settings the trainer does not have), into the same :class:`MigrationReport` as the reward
keys, with one :class:`~rewardhub.RewardhubDeprecationWarning` each. Keys spelled the same in verl and
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

import warnings
from collections.abc import Mapping
from typing import Any

from ..errors import RewardhubDeprecationWarning
from ..errors import UsageError
from ._legacy_rules import truthy
from .overrides import leaves as dotted_leaves

__all__ = ["NOT_HERE", "VERL_ROOTS", "map_verl_keys"]

#: left for the resource mapping (another table)
NOT_HERE = frozenset({"trainer.n_gpus_per_node", "trainer.nnodes",
                      "actor_rollout_ref.rollout.tensor_model_parallel_size"})
#: top-level sections that exist only in verl's config
VERL_ROOTS = ("actor_rollout_ref", "algorithm", "critic", "ray_init", "ray_kwargs", "global_profiler",
              "transfer_queue")

_FSDP = "an FSDP/parallelism setting of verl's workers; the trainer's learner is one process"
_ENGINE = "a setting of verl's GPU inference engine; the trainer's rollouters have no such knob"

# pattern (dotted, "*" = this key and everything under it) -> ("move", new key) | ("drop", reason) | (special,)
# first match wins; a key under data./trainer. that matches nothing is left for the trainer's schema
_TABLE: list[tuple[str, tuple[str, ...]]] = [
    # data
    ("data.train_batch_size", ("move", "rollout.prompts_per_step")),
    ("data.max_response_length", ("move", "rollout.max_new_tokens")),
    ("data.val_batch_size", ("drop", "evaluation generates the whole validation set, 32 prompts a call")),
    ("data.gen_batch_size", ("drop", "the trainer generates data.train_batch_size prompts a step")),
    ("data.shuffle", ("drop", "the trainer always shuffles, with data.seed, every epoch")),
    ("data.validation_shuffle", ("drop", "evaluation reads the validation set in order")),
    ("data.return_raw_chat", ("drop", "verl's dataloader output format; the trainer renders prompts itself")),
    ("data.return_raw_input_ids", ("drop", "verl's dataloader output format; the trainer renders prompts itself")),
    ("data.return_full_prompt", ("drop", "verl's dataloader output format; the trainer renders prompts itself")),
    ("data.return_multi_modal_inputs", ("drop", "the trainer is text-only")),
    ("data.image_key", ("drop", "the trainer is text-only")),
    ("data.video_key", ("drop", "the trainer is text-only")),
    ("data.tokenizer", ("drop", "the model's own tokenizer is used")),
    ("data.use_shm", ("drop", "the data is read by the driver from local files")),
    ("data.trust_remote_code", ("drop", "the data is read with pyarrow, no remote code")),
    ("data.dataloader_num_workers", ("drop", "the driver reads the data in one process")),
    ("data.filter_overlong_prompts_workers", ("drop", "the driver reads the data in one process")),
    ("data.reward_fn_key", ("drop", "rewards get data_source from each row (reward.rewards decides who scores)")),
    ("data.apply_chat_template_kwargs.*", ("drop", "the chat template is applied with its defaults")),
    ("data.custom_cls.*", ("drop", "verl dataset classes do not run here; give JSONL/parquet/save_to_disk data")),
    ("data.sampler.*", ("drop", "verl samplers do not run here; the trainer shuffles with data.seed")),
    ("data.datagen.*", ("drop", "verl's dynamic data generation does not run here")),
    ("data.tool_config_path", ("drop", "the trainer has no multi-turn tool calls")),
    # the model
    ("actor_rollout_ref.model.path", ("move", "model.path")),
    ("actor_rollout_ref.model.*", ("drop", "a model-loading/FSDP option of verl's workers (the trainer loads "
                                           "model.path with transformers as it is)")),
    # the actor (learner)
    ("actor_rollout_ref.actor.optim.lr", ("move", "trainer.lr")),
    ("actor_rollout_ref.actor.optim.weight_decay", ("move", "trainer.weight_decay")),
    ("actor_rollout_ref.actor.optim.lr_warmup_steps", ("warmup",)),
    ("actor_rollout_ref.actor.optim.warmup_style", ("move", "trainer.lr_schedule")),
    ("actor_rollout_ref.actor.optim.lr_scheduler_type", ("move", "trainer.lr_schedule")),
    ("actor_rollout_ref.actor.optim.min_lr_ratio", ("move", "trainer.min_lr_ratio")),
    ("actor_rollout_ref.actor.optim.lr_warmup_steps_ratio", ("drop", "give the warm-up in steps (lr_warmup_steps)")),
    ("actor_rollout_ref.actor.optim.*", ("drop", "an optimizer setting the trainer does not have (AdamW, "
                                                 "betas 0.9/0.99)")),
    ("actor_rollout_ref.actor.grad_clip", ("move", "trainer.max_grad_norm")),
    ("actor_rollout_ref.actor.ppo_epochs", ("move", "trainer.ppo_epochs")),
    ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", ("move", "trainer.micro_batch_size")),
    ("actor_rollout_ref.actor.ppo_micro_batch_size", ("move", "trainer.micro_batch_size")),
    ("actor_rollout_ref.actor.ppo_mini_batch_size", ("drop", "the trainer makes one optimizer step per batch "
                                                             "and PPO epoch (mini batch = data.train_batch_size)")),
    ("actor_rollout_ref.actor.clip_ratio", ("move", "trainer.clip_eps")),
    ("actor_rollout_ref.actor.clip_ratio_low", ("drop", "the clip range is symmetric (clip_ratio)")),
    ("actor_rollout_ref.actor.clip_ratio_high", ("drop", "the clip range is symmetric (clip_ratio)")),
    ("actor_rollout_ref.actor.clip_ratio_c", ("drop", "no dual-clip PPO in the trainer")),
    ("actor_rollout_ref.actor.use_kl_loss", ("kl",)),
    ("actor_rollout_ref.actor.kl_loss_coef", ("kl",)),
    ("actor_rollout_ref.actor.kl_loss_type", ("drop", "the KL term is the k3 estimator (verl's low_var_kl "
                                                      "without the clamp)")),
    ("actor_rollout_ref.actor.entropy_coeff", ("move", "trainer.entropy_coeff")),
    ("actor_rollout_ref.actor.loss_agg_mode", ("move", "trainer.loss_agg_mode")),
    ("actor_rollout_ref.actor.*", ("drop", _FSDP)),
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
    ("actor_rollout_ref.rollout.val_kwargs.n", ("move", "rollout.val_n")),
    ("actor_rollout_ref.rollout.val_kwargs.temperature", ("val_temperature",)),
    ("actor_rollout_ref.rollout.val_kwargs.do_sample", ("val_temperature",)),
    ("actor_rollout_ref.rollout.val_kwargs.*", ("drop", "evaluation samples with val_kwargs.n and temperature only")),
    ("actor_rollout_ref.rollout.*", ("drop", _ENGINE)),
    ("actor_rollout_ref.ref.*", ("drop", "the reference policy is the learner's starting weights (used when "
                                         "trainer.kl_coef > 0); verl's ref worker settings have no meaning here")),
    ("actor_rollout_ref.hybrid_engine", ("drop", "the trainer's rollouters and learner are separate processes")),
    ("actor_rollout_ref.*", ("drop", _FSDP)),
    # the algorithm
    ("algorithm.adv_estimator", ("adv",)),
    ("algorithm.norm_adv_by_std_in_grpo", ("move", "trainer.scale_advantages")),
    ("algorithm.use_kl_in_reward", ("kl",)),
    ("algorithm.kl_ctrl.kl_coef", ("kl",)),
    ("algorithm.kl_ctrl.*", ("drop", "the KL coefficient is fixed (no adaptive controller)")),
    ("algorithm.gamma", ("drop", "GRPO's advantages are per response (no discounting)")),
    ("algorithm.lam", ("drop", "GRPO's advantages are per response (no GAE)")),
    ("algorithm.*", ("drop", "a verl algorithm setting the trainer does not implement")),
    ("critic.*", ("drop", "GRPO has no critic")),
    ("ray_init.*", ("drop", "the trainer starts Ray itself (or joins RAY_ADDRESS)")),
    ("ray_kwargs.*", ("drop", "the trainer starts Ray itself (or joins RAY_ADDRESS)")),
    ("global_profiler.*", ("drop", "verl's profiler has no meaning here")),
    ("transfer_queue.*", ("drop", "verl's transfer queue has no meaning here")),
    # the trainer
    ("trainer.total_training_steps", ("move", "trainer.total_steps")),
    ("trainer.total_epochs", ("epochs",)),
    ("trainer.save_freq", ("save",)),
    ("trainer.logger", ("move", "trainer.logger")),
    ("trainer.project_name", ("move", "trainer.project_name")),
    ("trainer.experiment_name", ("move", "trainer.experiment_name")),
    ("trainer.default_hdfs_dir", ("drop", "checkpoints are written to the run folder only")),
    ("trainer.critic_warmup", ("drop", "GRPO has no critic")),
    ("trainer.resume_mode", ("drop", "resume with `rewardhub train ... --resume DIR`")),
    ("trainer.resume_from_path", ("drop", "resume with `rewardhub train ... --resume DIR`")),
    ("trainer.log_val_generations", ("drop", "evaluation logs scores, not generations")),
    ("trainer.val_generations_to_log_to_wandb", ("drop", "evaluation logs scores, not generations")),
    ("trainer.val_only", ("drop", "the trainer always trains")),
    ("trainer.balance_batch", ("drop", _FSDP)),
    ("trainer.use_legacy_worker_impl", ("drop", "verl's worker implementation has no meaning here")),
    ("trainer.ray_wait_register_center_timeout", ("drop", "verl's worker registration has no meaning here")),
    ("trainer.max_actor_ckpt_to_keep", ("drop", "every checkpoint is kept")),
    ("trainer.max_critic_ckpt_to_keep", ("drop", "GRPO has no critic")),
    ("trainer.del_local_ckpt_after_load", ("drop", "checkpoints are never deleted")),
    ("trainer.esi_redundant_time", ("drop", "verl's elastic-instance setting has no meaning here")),
    ("trainer.rollout_data_dir", ("drop", "the trainer does not dump rollouts")),
    ("trainer.validation_data_dir", ("drop", "the trainer does not dump validation generations")),
    ("trainer.profile_steps", ("drop", "verl's profiler has no meaning here")),
    ("trainer.profile_continuous_steps", ("drop", "verl's profiler has no meaning here")),
    ("trainer.val_before_train_only", ("drop", "the trainer always trains")),
]

_ENGINES = {"vllm": "vllm", "hf": "transformers", "transformers": "transformers"}


def _match(pattern: str, key: str) -> bool:
    if pattern.endswith(".*"):
        head = pattern[:-2]
        return key == head or key.startswith(head + ".")
    return key == pattern


def _rule(key: str) -> tuple[str, ...] | None:
    if key in NOT_HERE:
        return None
    for pattern, action in _TABLE:
        if _match(pattern, key):
            return action
    return None


def _pop(cfg: dict[str, Any], key: str) -> None:
    parts = key.split(".")
    nodes = [cfg]
    for p in parts[:-1]:
        nodes.append(nodes[-1][p])
    del nodes[-1][parts[-1]]
    for node, p in zip(reversed(nodes[:-1]), reversed(parts[:-1])):  # remove the mappings left empty
        if node[p] == {}:
            del node[p]


class _Mapping:
    def __init__(self, cfg: dict[str, Any], report: Any) -> None:
        self.cfg, self.report = cfg, report
        self.sets: dict[str, tuple[Any, str]] = {}

    def moved(self, key: str, new: str, value: Any) -> None:
        if new in self.sets and self.sets[new][0] != value:
            other_value, other = self.sets[new]
            raise UsageError(f"{other}={other_value!r} and {key}={value!r} both set {new} to different values\n"
                             "keep one of them")
        self.sets[new] = (value, key)
        self.report.moved.append({"from": key, "to": new})
        warnings.warn(f"verl key {key} is now {new}", RewardhubDeprecationWarning, stacklevel=5)

    def dropped(self, key: str, reason: str, value: Any) -> None:
        self.report.dropped.append({"key": key, "reason": reason, "value": value})
        warnings.warn(f"verl key {key}={value!r} is ignored: {reason}", RewardhubDeprecationWarning, stacklevel=5)

    def run(self) -> None:
        leaves = [(k, v) for root in ("data", *VERL_ROOTS, "trainer") if isinstance(self.cfg.get(root), Mapping)
                  for k, v in dotted_leaves(self.cfg[root], root)]
        taken = {k: (v, rule) for k, v in leaves if (rule := _rule(k)) is not None}
        if "trainer.total_training_steps" not in taken:  # then it is the trainer's own key, as it is
            taken.pop("trainer.total_epochs", None)
        if not taken:
            return
        for key in taken:
            _pop(self.cfg, key)
        for key, (value, action) in taken.items():
            if isinstance(value, str) and value.startswith("${") and value.endswith("}") \
                    and not value.startswith(("${oc.env:", "${oc.decode:")):
                self.dropped(key, f"an interpolation of another key of verl's config ({value}); write the value "
                                  "itself if it matters here", value)
            elif action[0] == "move":
                self.moved(key, action[1], value)
            elif action[0] == "drop":
                self.dropped(key, action[1], value)
            else:
                self.special(action[0], key, value, taken)
        for new, (value, _) in self.sets.items():
            self.put(new, value)

    def special(self, kind: str, key: str, value: Any, taken: dict[str, Any]) -> None:
        def given(k: str) -> Any:
            return taken[k][0] if k in taken else None

        if kind == "engine":
            engine = _ENGINES.get(str(value).lower())
            if engine:
                self.moved(key, "rollout.engine", engine)
            else:
                self.dropped(key, f"the trainer generates with transformers or vllm (rollout.engine), not {value}",
                             value)
        elif kind == "val_temperature":
            sample = given("actor_rollout_ref.rollout.val_kwargs.do_sample")
            if key.endswith("do_sample"):
                if sample is not None and not truthy(sample):
                    self.moved(key, "rollout.val_temperature", 0.0)  # greedy
                else:
                    self.dropped(key, "sampling is on whenever rollout.val_temperature > 0", value)
            elif sample is not None and not truthy(sample):
                self.dropped(key, "do_sample=false: evaluation is greedy", value)
            else:
                self.moved(key, "rollout.val_temperature", value)
        elif kind == "kl":
            use_loss = given("actor_rollout_ref.actor.use_kl_loss")
            in_reward = given("algorithm.use_kl_in_reward")
            if key.endswith("use_kl_loss") or key.endswith("use_kl_in_reward"):
                self.dropped(key, "the KL term is on when trainer.kl_coef > 0 (a loss term, never in the reward)",
                             value)
            elif key.endswith("kl_loss_coef"):
                if use_loss is not None and truthy(use_loss):
                    self.moved(key, "trainer.kl_coef", value)
                else:
                    self.dropped(key, "use_kl_loss is not true", value)
            else:  # algorithm.kl_ctrl.kl_coef: verl uses it only as a KL penalty in the reward
                if in_reward is not None and truthy(in_reward) and not (use_loss is not None and truthy(use_loss)):
                    self.moved(key, "trainer.kl_coef", value)
                    self.report.notes.append(f"{key}: the trainer applies the KL term in the loss, not in the reward")
                else:
                    self.dropped(key, "verl applies it only with algorithm.use_kl_in_reward=true, which is not set"
                                 + ("; the KL loss coefficient is used" if use_loss is not None and truthy(use_loss)
                                    else ""), value)
        elif kind == "adv":
            if str(value).lower() == "grpo":
                self.dropped(key, "the trainer is GRPO (group-normalised advantages), as asked", value)
            else:
                self.dropped(key, f"the trainer computes GRPO advantages only; {value} is not implemented", value)
                self.report.notes.append(f"{key}={value!r}: this run uses GRPO advantages instead")
        elif kind == "epochs":  # only with total_training_steps (else left in place)
            self.dropped(key, "trainer.total_training_steps is set and wins, as in verl", value)
        elif kind == "warmup":  # verl: -1 means "use lr_warmup_steps_ratio"
            if str(value).lstrip("-").isdigit() and int(value) < 0:
                self.dropped(key, "negative: verl then uses lr_warmup_steps_ratio (give the warm-up in steps)", value)
            else:
                self.moved(key, "trainer.lr_warmup_steps", value)
        elif kind == "save":
            every = int(value) if str(value).lstrip("-").isdigit() else value
            if isinstance(every, int) and every <= 0:
                self.moved(key, "trainer.checkpoint_every", 0)
                self.report.notes.append(f"{key}={value}: the trainer still saves one checkpoint at the end")
            else:
                self.moved(key, "trainer.checkpoint_every", every)

    def put(self, new: str, value: Any) -> None:
        section, name = new.split(".", 1)
        node = self.cfg.get(section)
        if node is None:
            node = self.cfg[section] = {}
        if not isinstance(node, dict):
            raise UsageError(f"{section}={node!r} is not a mapping; verl keys move into it")
        if name in node and node[name] != value:
            raise UsageError(f"{self.sets[new][1]}={value!r} and {new}={node[name]!r} are both set, to different "
                             f"values\nkeep one of them ({new} is the trainer's key)")
        node[name] = value


def map_verl_keys(cfg: dict[str, Any], report: Any) -> None:
    """Move verl's trainer keys in ``cfg`` (a plain dict, changed in place) to the trainer's, recording each
    in ``report`` (``moved`` / ``dropped`` / ``notes``)."""
    _Mapping(cfg, report).run()
