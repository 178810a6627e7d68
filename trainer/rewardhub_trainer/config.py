"""The trainer's sections of the config (``trainer``, ``model``, ``rollout``, ``data``, ``resources``):
schema and validation.

The whole config is read by :func:`rewardhub.config.load_config` (the one loader, which applies the
legacy shim and validates ``reward:``); this module turns the sections it owns into frozen, picklable
dataclasses and rejects bad values *before* Ray starts. It checks them with the core's validator
(:func:`rewardhub.config.fields.check_section`: the dataclasses below and the table :data:`RULES`), so
an error reads the same as one in ``reward:``; the checks that span keys (model source, engine
settings, GPU asks, data files) are in :mod:`rewardhub_trainer.config_checks`. Whether the rollout
engine can run here is checked where engines are built (:func:`rewardhub_trainer.engine.check_engine`),
not here. Nothing here imports Ray or torch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import Any

from rewardhub.config import ConfigPlan
from rewardhub.config import RewardConfig
from rewardhub.config.fields import Rule
from rewardhub.config.fields import above
from rewardhub.config.fields import at_least
from rewardhub.config.fields import between
from rewardhub.config.fields import check_section
from rewardhub.config.fields import invalid
from rewardhub.config.fields import one_of
from rewardhub.config.schema import as_dict
from rewardhub.config.schema import validate_reward
from rewardhub.errors import UsageError

from .config_checks import BUILTIN_MODELS
from .config_checks import check_cuda
from .config_checks import check_data_files
from .config_checks import check_model
from .config_checks import check_rollout
from .config_checks import check_trainer
from .config_checks import named_task
from .config_checks import rollouter_gpus
from .devices import AUTOCASTS
from .devices import DEVICES
from .devices import DTYPES
from .placement import RULES as RESOURCE_RULES
from .placement import Resources
from .placement import parse_resources

__all__ = [
    "MODES",
    "DataConfig",
    "LearnerSettings",
    "ModelConfig",
    "RolloutConfig",
    "TrainConfig",
    "TrainerConfig",
    "parse_config",
]

MODES = ("sync", "fully_async")
ENGINES = ("transformers", "vllm")
DATA_SOURCES = ("builtin", "reasoning_gym")


@dataclass(frozen=True)
class TrainerConfig:
    """``trainer:`` — how the run is orchestrated and optimised."""

    mode: str = "sync"
    total_steps: int = 10
    staleness_limit: int = 1
    sync_interval: int = 1
    seed: int = 0
    lr: float = 1e-5
    kl_coef: float = 0.0
    clip_eps: float = 0.2
    #: dual-clip PPO (verl's clip_ratio_c and its default): a token of negative advantage loses at most
    #: clip_ratio_c * |advantage|, however far its ratio has run (stale or extreme behaviour log-probs);
    #: 0 turns it off (plain PPO clip)
    clip_ratio_c: float = 3.0
    ppo_epochs: int = 1
    micro_batch_size: int = 8
    max_grad_norm: float = 1.0  #: the gradient's norm is clipped to this (0: not clipped, only measured)
    weight_decay: float = 0.0
    queue_size: int = 2  #: batches the message queue holds at most
    num_rollouters: int = 1
    #: data-parallel learner processes (torch.distributed; each asks for resources.learner)
    num_learners: int = 1
    num_reward_workers: int = 1  #: reward workers per pool (reward.workers.num_workers wins when set)
    #: fully_async: batches scored at the same time, each by its own client and pool of reward workers
    #: (an I/O-bound reward, e.g. an LLM judge, then overlaps across batches too)
    score_concurrency: int = 1
    max_restarts: int = 3
    torch_threads: int = 0  #: 0: automatic (all cores in sync mode, half of them each in fully_async)
    #: fully_async on CPU, automatic threads: the learner and the rollouters on a node take the
    #: threads of those that wait (cores.py): never (the default: no figure on the demo shows a gain) |
    #: auto (for models large enough to gain) | always
    lend_idle_cores: str = "never"
    scale_advantages: bool = True
    #: learner matmuls: auto (bf16 where the hardware reports it natively, see devices.py) | none (fp32) |
    #: bfloat16
    autocast: str = "auto"
    #: learner ranks, rollouters, evaluator: auto (cuda when the actor sees a GPU; one Ray gave none sees
    #: none: CUDA_VISIBLE_DEVICES="") | cpu | cuda (each learner rank then needs exactly one GPU)
    device: str = "auto"
    #: fully_async: start a batch only if it will still be within staleness_limit when trained
    staleness_gate: bool = True
    # evaluation on data.val_files (verl's names): every test_freq steps (0: only at the end, -1: never)
    # and, with val_before_train, before the first step; total_epochs > 0 sets total_steps from the data
    test_freq: int = 0
    val_before_train: bool = False
    total_epochs: int = 0
    default_local_dir: str = ""  #: the run folder when --output is not given
    # optimisation knobs (verl's names): lr_schedule constant | linear | cosine after lr_warmup_steps
    # (decaying to min_lr_ratio * lr at the last step), an entropy bonus, the loss aggregation mode
    lr_schedule: str = "constant"
    lr_warmup_steps: int = 0
    min_lr_ratio: float = 0.0
    entropy_coeff: float = 0.0
    loss_agg_mode: str = "seq-mean-token-mean"  #: token-mean | seq-mean-token-mean | seq-mean-token-sum
    # trackers (loggers.py): e.g. [console, tensorboard, wandb, mlflow]; the project and run names
    logger: Any = None
    project_name: str = ""
    experiment_name: str = ""
    # -- checkpoints and faults: the learner restarts from the latest checkpoint; a fault that keeps
    # coming back stops the run with one line naming it
    checkpoint_every: int = 50  #: steps between checkpoints (0: none by count; the last step is always saved)
    checkpoint_minutes: float = 10.0  #: also save when this long has passed since the last one (0: off)
    checkpoint_keep: int = 3  #: complete checkpoints kept, the oldest removed first
    weight_sync_retries: int = 3  #: failed weight syncs in a row on one rollouter before the run stops
    max_stale_batches: int = 20  #: fully_async: batches in a row all dropped as stale before the run stops
    max_nonfinite_steps: int = 3  #: optimizer updates in a row skipped as non-finite before the run stops
    # : a reward failing more often in 3 steps in a row stops the run (1: never)
    max_reward_error_rate: float = 0.5
    reward_timeout_s: float = 60.0  #: timeout_s of each reward call whose term and reward set none (0: none)
    # : a generate/train call unanswered this long: its actor is restarted (0: never)
    call_timeout_s: float = 1800.0


@dataclass(frozen=True)
class ModelConfig:
    """``model:`` — exactly one of ``path``, ``builtin`` or ``tiny``."""

    path: str | None = None
    builtin: str | None = None
    tiny: Mapping[str, Any] | None = None
    dtype: str = "auto"  #: the learner's master weights: auto (float32) | float32 | bfloat16


@dataclass(frozen=True)
class RolloutConfig:
    """``rollout:`` — generation settings."""

    engine: str = "transformers"
    n: int = 4
    prompts_per_step: int = 4
    max_new_tokens: int = 32
    temperature: float = 1.0
    top_p: float = 1.0
    #: generation weights: auto (bf16 where the hardware reports it natively) | float32 | bfloat16 (synced
    #: weights are cast)
    dtype: str = "auto"
    val_n: int = 1  #: evaluation: responses per validation prompt
    top_k: int = 0  #: sample among the k most likely tokens (0 or -1: all)
    stop: Any = None  #: strings that end a response, like end-of-sequence (transformers engine)
    stop_token_ids: Any = None  #: token ids that end a response
    val_temperature: float = 0.0  #: evaluation: 0 is greedy
    # vLLM engine settings (verl's actor_rollout_ref.rollout.* map onto them; the transformers engine has
    # none)
    max_model_len: int = 0  #: prompt + response tokens at most (0: the model's context, at most 2048)
    gpu_memory_utilization: float = 0.5  #: on a GPU: the fraction of its memory vLLM may take
    enforce_eager: bool = True  #: no CUDA graphs (faster start, slower decoding)
    #: GPUs of one rollouter's engine; > 1 makes each rollouter ask for that many
    #: (resources.rollouter.num_gpus)
    tensor_parallel_size: int = 1


@dataclass(frozen=True)
class DataConfig:
    """``data:`` — where prompts come from and how they are shown to the model."""

    source: str = "builtin"
    dataset: str = "basic_arithmetic"
    size: int = 64
    seed: int = 0
    template: str = "auto"  #: auto | chat | plain
    instruction: str = ""  #: appended to every question
    system: str = ""  #: chat template: a system message (else the template's default)
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    # files (verl's keys): JSONL/parquet files or save_to_disk folders, one or a list; train_files
    # replaces source; prompt_key/answer_key name the columns ("": prompt|question, and
    # reward_model.ground_truth|ground_truth|answer); max_prompt_length in tokens (0: no limit)
    train_files: Any = None
    val_files: Any = None
    prompt_key: str = ""
    answer_key: str = ""
    max_prompt_length: int = 0
    filter_overlong_prompts: bool = False  #: drop longer prompts (counted); else truncation applies
    truncation: str = "error"  #: error | left | right | middle


@dataclass(frozen=True)
class LearnerSettings:
    """What the learner reads of the plan: ``trainer``'s optimisation keys, with the sampling temperature
    and the model's dtype (:meth:`TrainConfig.learner_settings`); the defaults are a bare learner's."""

    lr: float = 1e-5
    kl_coef: float = 0.0
    clip_eps: float = 0.2
    ppo_epochs: int = 1
    micro_batch_size: int = 8
    max_grad_norm: float = 1.0  #: 0: no clipping (the norm is still measured)
    weight_decay: float = 0.0
    clip_ratio_c: float = 3.0  #: dual clip for negative advantages (policy_loss_per_token); 0: off
    temperature: float = 1.0  #: rollout.temperature
    dtype: str = "float32"  #: model.dtype
    autocast: str = "none"  #: none | bfloat16 (fp32 master weights, bf16 matmuls)
    # verl's knobs: the LR schedule (lr_factor), an entropy bonus, the loss aggregation (aggregate_loss)
    lr_schedule: str = "constant"
    lr_warmup_steps: int = 0
    min_lr_ratio: float = 0.0
    total_steps: int = 0
    entropy_coeff: float = 0.0
    loss_agg_mode: str = "seq-mean-token-mean"
    device: str = "cpu"  #: cpu | cuda (resolved by devices.choose in the learner's process)


@dataclass(frozen=True)
class TrainConfig:
    """Everything a run needs, as frozen picklable values (the reward section as the loader typed it)."""

    trainer: TrainerConfig
    model: ModelConfig
    rollout: RolloutConfig
    data: DataConfig
    reward: RewardConfig
    resources: Resources = field(default_factory=Resources)

    @property
    def samples_per_step(self) -> int:
        return self.rollout.n * self.rollout.prompts_per_step

    def learner_settings(self) -> LearnerSettings:
        """The learner's settings: every :class:`LearnerSettings` field is the ``trainer`` key of its name,
        except ``temperature`` (``rollout.temperature``) and ``dtype`` (``model.dtype``)."""
        keys = {f.name for f in dataclasses.fields(LearnerSettings)} - {"temperature", "dtype"}
        return LearnerSettings(**{k: getattr(self.trainer, k) for k in keys},
                               temperature=self.rollout.temperature, dtype=self.model.dtype)

    def to_dict(self) -> dict[str, Any]:
        plain = {k: dataclasses.asdict(getattr(self, k)) for k in ("trainer", "model", "rollout", "data")}
        return {**plain, "reward": as_dict(self.reward), "resources": self.resources.to_dict()}


#: section -> field path -> what its value may be (beyond its type); shown in the errors
RULES: dict[str, dict[str, Rule]] = {
    "trainer": {
        "mode": one_of(*MODES),
        **{
            name: at_least(1)
            for name in (
                "total_steps",
                "sync_interval",
                "ppo_epochs",
                "micro_batch_size",
                "queue_size",
                "num_rollouters",
                "num_learners",
                "num_reward_workers",
                "score_concurrency",
                "checkpoint_keep",
                "weight_sync_retries",
                "max_stale_batches",
                "max_nonfinite_steps",
            )
        },
        **{
            name: at_least(0)
            for name in (
                "staleness_limit",
                "checkpoint_every",
                "max_restarts",
                "torch_threads",
                "lr_warmup_steps",
            )
        },
        "checkpoint_minutes": at_least(0, "0 turns it off"),
        "lr": above(0),
        "kl_coef": at_least(0, "0 turns the KL term off"),
        "clip_eps": between(0, 1, exclusive=True),
        "clip_ratio_c": above(
            1, "the dual clip bounds a negative advantage's loss at clip_ratio_c * |A|; 0: off", also=(0,)
        ),
        "max_grad_norm": at_least(0, "the gradient's norm is clipped to it (0: not clipped)"),
        "weight_decay": at_least(0),
        "seed": at_least(0),
        "autocast": one_of(*AUTOCASTS),
        "device": one_of(*DEVICES),
        "lend_idle_cores": one_of("auto", "always", "never"),
        "test_freq": at_least(-1, "-1 is never, 0 at the end"),
        "total_epochs": at_least(0, "0 uses total_steps"),
        "lr_schedule": one_of("constant", "linear", "cosine"),
        "loss_agg_mode": one_of("token-mean", "seq-mean-token-mean", "seq-mean-token-sum"),
        "min_lr_ratio": between(0, 1),
        "entropy_coeff": at_least(0, "0 turns it off"),
        "max_reward_error_rate": between(0, 1),
        "reward_timeout_s": at_least(0, "0 leaves rewards without a timeout"),
        "call_timeout_s": at_least(0, "0 waits for ever"),
    },
    "model": {
        "builtin": one_of(*BUILTIN_MODELS),
        "dtype": one_of(*DTYPES),
    },
    "rollout": {
        "engine": one_of(*ENGINES),
        "dtype": one_of(*DTYPES),
        "n": at_least(2, "GRPO needs at least 2 responses per prompt (e.g. rollout.n=4)"),
        "prompts_per_step": at_least(1),
        "max_new_tokens": at_least(1),
        "temperature": above(0, "GRPO samples"),
        "top_p": Rule(minimum=0, minimum_inclusive=False, maximum=1),
        "val_n": at_least(1),
        "top_k": at_least(-1, "-1 or 0 samples among all tokens"),
        "val_temperature": at_least(0, "0 is greedy"),
        "max_model_len": at_least(0, "0 is the model's context, at most 2048"),
        "gpu_memory_utilization": Rule(minimum=0, minimum_inclusive=False, maximum=1),
        "tensor_parallel_size": at_least(1),
    },
    "data": {
        "truncation": one_of("error", "left", "right", "middle"),
        "max_prompt_length": at_least(0, "0 is no limit"),
        "template": one_of("auto", "chat", "plain"),
        "size": at_least(1),
        "seed": at_least(0),
    },
    "resources": RESOURCE_RULES,
}


def _section(cls: type, raw: Any, key: str) -> Any:
    """Dataclass ``cls`` from mapping ``raw`` (the config's section ``key``), checked by the core's
    validator."""
    from rewardhub.config.loader import resolve_or_explain

    return cls(**check_section(resolve_or_explain(raw, key), cls, key, RULES[key]))


def parse_config(config: ConfigPlan | Mapping[str, Any]) -> TrainConfig:
    """Validate the trainer's sections of a loaded plan (its ``reward`` taken as it is), or of a raw
    config mapping (its ``reward:`` validated here too).

    :raises UsageError: naming the key and the fix. The reward terms are resolved separately by
        :func:`rewardhub_trainer.rewards.validate_rewards`.
    """
    cfg = config.config if isinstance(config, ConfigPlan) else config
    trainer = _section(TrainerConfig, cfg.get("trainer"), "trainer")
    model = _section(ModelConfig, cfg.get("model"), "model")
    rollout = _section(RolloutConfig, cfg.get("rollout"), "rollout")
    data = _section(DataConfig, cfg.get("data"), "data")
    from rewardhub.config.loader import resolve_or_explain
    from rewardhub.scorers import scores_remotely

    resources = parse_resources(resolve_or_explain(cfg.get("resources"), "resources"))
    task = named_task(data, DATA_SOURCES)
    reward = config.reward if isinstance(config, ConfigPlan) else validate_reward(cfg.get("reward"))
    if task is not None and not (reward.rewards or scores_remotely(reward)):  # data.source alone: its terms
        raw = resolve_or_explain(cfg.get("reward"), "reward") or {}
        reward = validate_reward({**raw, **task.reward_section})
    if not (reward.rewards or scores_remotely(reward)):
        raise UsageError("reward.rewards is empty: name at least one reward term\n"
                         "add e.g. reward: {rewards: [{name: exact_match}]} (see `rewardhub list`)")
    check_trainer(trainer)
    check_model(model)
    if resources.learner.num_gpus > 1:
        raise invalid(
            "resources.learner.num_gpus",
            resources.learner.num_gpus,
            "set it to 1 and trainer.num_learners to the number of GPUs (one data-parallel rank each)",
            "a learner rank uses exactly one GPU",
        )
    check_rollout(rollout)
    resources = rollouter_gpus(rollout, resources)
    if trainer.device == "cuda":
        check_cuda(resources, evaluator=data.val_files is not None)
    check_data_files(data)
    from .loggers import logger_names

    logger_names(trainer.logger)
    return TrainConfig(trainer=trainer, model=model, rollout=rollout, data=data, reward=reward,
                       resources=resources)
