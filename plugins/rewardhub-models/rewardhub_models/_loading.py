"""Settings from the term and ``reward.reward_model``, and one cached model per process and path."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Mapping
from typing import Any

from rewardhub.errors import UsageError

_CACHE: dict[tuple[Any, ...], Any] = {}
_LOCK = threading.Lock()


def settings(section: Mapping[str, Any] | None, **explicit: Any) -> dict[str, Any]:
    """The term's own kwargs win over the ``reward.reward_model`` section."""
    out = dict(section or {})
    out.update({k: v for k, v in explicit.items() if v is not None})
    path = out.get("model_path")
    if not path:
        raise UsageError("a model reward needs a model: set kwargs.model_path on the term, or "
                         "reward.reward_model.model_path (legacy: reward_model.model.path)")
    path = os.path.expanduser(str(path))
    if not os.path.exists(path):
        raise UsageError(f"reward model path {path!r} does not exist\n"
                         "point reward.reward_model.model_path (or the term's kwargs.model_path) at a saved "
                         "transformers model folder")
    out["model_path"] = path
    if out.get("external_lib"):  # verl's model.external_lib: registers a custom architecture on import
        import importlib

        try:
            importlib.import_module(str(out["external_lib"]))
        except ImportError as exc:
            raise UsageError(
                f"reward.reward_model.external_lib={out['external_lib']!r} cannot be imported: {exc}\n"
                "install that module, or remove the key"
            ) from exc
    return out


def pick_device(device: str) -> str:
    """``auto`` (the default): ``cuda`` in a process Ray gave GPUs (a reward-model pool with
    ``n_gpus_per_node``, ``reward.workers.num_gpus``), else ``cpu``; any other value as given.

    A process that uses a GPU Ray did not give it could take the trainer's: ``auto`` never does.
    """
    if device != "auto":
        return device
    ray = sys.modules.get("ray")  # never imported here: a process Ray runs has it already
    try:
        ids = list(ray.get_gpu_ids()) if ray is not None and ray.is_initialized() else []
    except Exception:  # not a Ray worker
        ids = []
    if not ids:
        return "cpu"
    import torch

    if not torch.cuda.is_available():
        raise UsageError(f"this reward worker was given GPUs {ids} by Ray, but torch sees no CUDA device\n"
                         "install a CUDA build of torch on the GPU nodes, or set kwargs.device: cpu")
    return "cuda"


def load_once(cls: Any, model_path: str, trust_remote_code: bool = False, dtype: str = "float32",
              device: str = "auto") -> Any:
    """``cls(model_path, ...)`` built once per process and settings (thread-safe): each model is
    loaded once, whichever batch or thread asks for it first. ``device``: :func:`pick_device`."""
    device = pick_device(device)
    key = (cls.__module__, cls.__qualname__, model_path, trust_remote_code, dtype, device)
    with _LOCK:
        if key not in _CACHE:
            _CACHE[key] = cls(model_path, trust_remote_code=trust_remote_code, dtype=dtype, device=device)
        return _CACHE[key]


def join_text(tokenizer: Any, prompt: Any, response: str, template: str = "auto") -> str:
    """Prompt and response as the model was trained to read them (chat template when it has one)."""
    prompt = "" if prompt is None else prompt
    has_chat = bool(getattr(tokenizer, "chat_template", None))
    if template == "chat" or (template == "auto" and has_chat):
        messages = list(prompt) if isinstance(prompt, list) else [{"role": "user", "content": str(prompt)}]
        messages.append({"role": "assistant", "content": response})
        return str(tokenizer.apply_chat_template(messages, tokenize=False))
    if isinstance(prompt, list):
        prompt = "\n".join(str(m.get("content", "")) for m in prompt if isinstance(m, Mapping))
    return f"{prompt}{response}"


def load_tokenizer(path: str, trust_remote_code: bool = False) -> Any:
    """The tokenizer saved with the model. The class named in ``tokenizer_config.json`` wins: some
    transformers versions pick the model type's default tokenizer over it (a byte-level ByT5
    tokenizer saved next to a Qwen2 model would come back as Qwen2's, with an empty vocabulary)."""
    import json

    import transformers
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    try:
        with open(os.path.join(path, "tokenizer_config.json"), encoding="utf-8") as f:
            named = json.load(f).get("tokenizer_class")
    except (OSError, ValueError):
        named = None
    if named and type(tok).__name__ not in (named, named + "Fast") and hasattr(transformers, named):
        tok = getattr(transformers, named).from_pretrained(path)
    return tok
