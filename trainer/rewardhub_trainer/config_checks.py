"""Checks of the trainer's config that one key's rule cannot make: the model source, the rollout
settings the engine cannot honour, the GPUs each role asks for, and the data file names.

:func:`rewardhub_trainer.config.parse_config` calls them after each section has passed its field rules
(:data:`rewardhub_trainer.config.RULES`); each raises the core's one error wording
(:func:`rewardhub.config.fields.invalid`) naming the key and the fix. The model sources
(:data:`BUILTIN_MODELS`, :data:`TINY_ARCHS`, :data:`TINY_RULES`) are defined here. Nothing here
imports Ray or torch.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING
from typing import Any

from rewardhub.config.fields import at_least
from rewardhub.config.fields import check_scalar
from rewardhub.config.fields import invalid
from rewardhub.errors import UsageError

if TYPE_CHECKING:
    from .config import DataConfig
    from .config import ModelConfig
    from .config import RolloutConfig
    from .config import TrainerConfig
    from .placement import Resources

__all__ = ["BUILTIN_MODELS", "TINY_ARCHS", "TINY_DEFAULTS", "TINY_RULES", "check_cuda", "check_data_files",
           "check_model", "check_rollout", "check_trainer", "named_task", "rollouter_gpus"]

BUILTIN_MODELS = ("smollm2-135m",)
TINY_ARCHS = ("qwen2", "llama")
#: what model.tiny builds when a key is not given (:func:`rewardhub_trainer.models.materialize`)
TINY_DEFAULTS: Mapping[str, Any] = {
    "arch": "qwen2",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 1024,
    "seed": 0,
}
#: model.tiny's numbers (the other keys go to the transformers config as given)
TINY_RULES = {
    "hidden_size": at_least(2, "a head's size (hidden_size / num_attention_heads) is a whole even number"),
    **{
        k: at_least(1)
        for k in (
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "max_position_embeddings",
        )
    },
    "seed": at_least(0),
}


def _check_list(value: Any, kind: type, key: str, what: str) -> None:
    if value is not None and not (isinstance(value, (list, tuple)) and all(
            isinstance(v, kind) and not isinstance(v, bool) for v in value)):
        raise invalid(key, value, f"expected {what}")


def check_model(model: ModelConfig) -> None:
    """Exactly one model source; ``model.path`` a saved Hugging Face folder; ``model.tiny``'s sizes."""
    given = [k for k in ("path", "builtin", "tiny") if getattr(model, k)]
    if len(given) != 1:
        raise UsageError(
            (f"model sets {' and '.join('model.' + g for g in given)}" if given
             else "model sets none of model.path, model.builtin, model.tiny")
            + "\nset exactly one of model.path (a local Hugging Face folder), "
            f"model.builtin ({', '.join(BUILTIN_MODELS)}) or model.tiny ({{arch: qwen2}})")
    if model.path:
        path = os.path.expanduser(model.path)
        if not os.path.isdir(path):
            raise invalid(
                "model.path",
                model.path,
                "point it at a local model folder (config.json + weights), or use "
                "model.builtin=smollm2-135m or model.tiny.arch=qwen2",
                "no such folder",
            )
        if not os.path.isfile(os.path.join(path, "config.json")):
            raise invalid(
                "model.path", model.path, "it must be a saved Hugging Face model folder", "no config.json"
            )
    if model.tiny:
        arch = model.tiny.get("arch", "qwen2")
        if arch not in TINY_ARCHS:
            raise invalid("model.tiny.arch", arch, f"allowed: {', '.join(TINY_ARCHS)}")
        for key, rule in TINY_RULES.items():  # the sizes models.py builds the model from
            if key in model.tiny:
                rule.check(f"model.tiny.{key}", check_scalar(f"model.tiny.{key}", model.tiny[key], int))
        _check_tiny_shapes(model.tiny)


def _check_tiny_shapes(tiny: Mapping[str, Any]) -> None:
    """The sizes of ``model.tiny`` fit together (else a torch shape error from deep inside the rollouter,
    after Ray started): the heads split the hidden size into even halves (rotary embeddings), and the
    key/value heads divide the attention heads."""
    spec = {**TINY_DEFAULTS, **tiny}
    hidden, heads, kv = spec["hidden_size"], spec["num_attention_heads"], spec["num_key_value_heads"]

    def said(key: str) -> str:
        return f"model.tiny.{key}={spec[key]}" + ("" if key in tiny else " (the default)")

    if "head_dim" not in tiny and (hidden % heads or (hidden // heads) % 2):
        fits = [h for h in range(1, min(hidden, 4096) + 1) if hidden % h == 0 and (hidden // h) % 2 == 0]
        raise UsageError(
            f"{said('num_attention_heads')} does not fit {said('hidden_size')}: each head gets "
            "hidden_size / num_attention_heads dimensions, which must be a whole even number\n"
            f"set model.tiny.num_attention_heads to one of {', '.join(map(str, fits[:8]))}"
            f"{' ...' if len(fits) > 8 else ''} (or change model.tiny.hidden_size)")
    if heads % kv:
        raise UsageError(
            f"{said('num_key_value_heads')} does not divide {said('num_attention_heads')}\n"
            "each key/value head serves a whole number of attention heads: pick a divisor")


#: the shortest trainer.call_timeout_s (0 aside): an actor's ordinary call (a weight load, a batch on a
#: busy host) takes seconds, and one past the bound is killed as hung
MIN_CALL_TIMEOUT_S = 10.0


def check_trainer(trainer: TrainerConfig) -> None:
    """Bounds one key's rule cannot say: ``trainer.call_timeout_s`` is 0 (no deadline) or a sane one."""
    if 0 < trainer.call_timeout_s < MIN_CALL_TIMEOUT_S:
        raise invalid("trainer.call_timeout_s", trainer.call_timeout_s,
                      f"allowed: 0 (no deadline) or a value >= {MIN_CALL_TIMEOUT_S:g} "
                      "(seconds; default 1800)",
                      "every call on an actor (loading weights, a batch on a busy host) would count as hung")


def check_rollout(rollout: RolloutConfig) -> None:
    """Sampling settings the chosen engine cannot honour, and the stop lists' types."""
    truncated = {"top_p": (rollout.top_p < 1, "rollout.top_p=1"),
                 "top_k": (rollout.top_k > 0, "rollout.top_k=-1 (or 0)")}
    for key, (cut, fix) in truncated.items():
        if rollout.engine == "vllm" and cut:
            raise invalid(
                f"rollout.{key}",
                getattr(rollout, key),
                f"use {fix} with vllm, or rollout.engine=transformers (which records whole-vocabulary "
                "log-probs, as the learner does)",
                "with rollout.engine=vllm it is not supported: vLLM records the log-probs of the truncated "
                f"({key.replace('_', '-')} renormalised) distribution while the learner computes them over "
                "the whole vocabulary, so the PPO ratio would be wrong from the first step",
            )
    if rollout.val_n != 1 and rollout.val_temperature <= 0:
        raise invalid("rollout.val_n", rollout.val_n, "set rollout.val_temperature > 0 (0 is greedy)",
                      "more than one response per prompt needs sampling")
    _check_list(rollout.stop, str, "rollout.stop", "a list of strings")
    if rollout.stop and any(v == "" for v in rollout.stop):
        raise invalid("rollout.stop", rollout.stop, "remove the empty string (or the key)",
                      "an empty stop string matches at once: every response would be empty")
    _check_list(rollout.stop_token_ids, int, "rollout.stop_token_ids", "a list of integers")
    if rollout.stop and rollout.engine == "vllm":
        raise invalid("rollout.stop", rollout.stop, "with vllm, give rollout.stop_token_ids",
                      "stop strings need rollout.engine=transformers")


def check_cuda(resources: Resources, *, evaluator: bool) -> None:
    """``trainer.device=cuda``: every role that runs the model asks Ray for a GPU (one given none sees
    none)."""
    evaluator_gpus = (resources.evaluator or resources.rollouter).num_gpus
    for role, gpus in (("learner", resources.learner.num_gpus), ("rollouter", resources.rollouter.num_gpus),
                       ("evaluator", evaluator_gpus if evaluator else 1.0)):
        if gpus <= 0:
            raise invalid(
                "trainer.device",
                "cuda",
                f"set resources.{role}.num_gpus (1, or a share such as 0.5), or use trainer.device=auto",
                f"the {role} asks Ray for no GPU, so it would see none (an actor given no GPU gets "
                "CUDA_VISIBLE_DEVICES='')",
            )


def rollouter_gpus(rollout: RolloutConfig, resources: Resources) -> Resources:
    """``rollout.tensor_parallel_size`` > 1: each rollouter asks for that many GPUs (set here when
    ``resources.rollouter.num_gpus`` is 0; another value is an error)."""
    tp = rollout.tensor_parallel_size
    if tp == 1:
        return resources
    if rollout.engine != "vllm":
        raise invalid(
            "rollout.tensor_parallel_size",
            tp,
            "set rollout.engine=vllm, or rollout.tensor_parallel_size=1",
            "only the vLLM engine splits a model over GPUs",
        )
    have = resources.rollouter.num_gpus
    if have == 0:
        return dataclasses.replace(
            resources, rollouter=dataclasses.replace(resources.rollouter, num_gpus=float(tp))
        )
    if have != tp:
        raise invalid("resources.rollouter.num_gpus", have, f"set it to {tp} (or leave it out)",
                      f"rollout.tensor_parallel_size={tp} needs {tp} GPUs per rollouter")
    return resources


def check_data_files(data: DataConfig) -> None:
    """``data.train_files`` / ``data.val_files``: a path or a non-empty list of paths, none of them empty."""
    for key in ("train_files", "val_files"):
        value = getattr(data, key)
        if not (value is None or isinstance(value, str) or (
                isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value))):
            raise invalid(f"data.{key}", value, "expected a path or a list of paths")
        if value is not None and not all(
            str(v).strip() for v in ([value] if isinstance(value, str) else value)
        ):
            raise invalid(f"data.{key}", value, f"give a file or folder, or leave data.{key} out"
                          + (" (the prompts then come from data.source)" if key == "train_files" else ""),
                          "an empty path names no file")


def named_task(data: DataConfig, sources: tuple[str, ...]) -> Any:
    """The installed task that ``data.source`` names (``None``: one of ``sources``, or data files)."""
    if data.source in sources or data.train_files is not None:
        return None
    from rewardhub.tasks import get_task

    try:
        return get_task(data.source)
    except UsageError as exc:
        raise UsageError(f"data.source={data.source!r} is not {', '.join(sources)} or an installed "
                         "task\n" + str(exc).partition("\n")[2]) from None
