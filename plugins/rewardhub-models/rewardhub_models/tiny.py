"""A tiny random reward model built offline: for smoke tests of a reward-model set-up (no download).

    from rewardhub_models.tiny import build_tiny_reward_model
    build_tiny_reward_model("/tmp/tiny-rm")   # then reward.reward_model.model_path=/tmp/tiny-rm

Its scores are deterministic for a seed and differ between texts, and mean nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["build_tiny_reward_model", "save_byt5"]


def save_byt5(tok: Any, path: str | Path) -> None:
    """Save a ByT5 tokenizer so that AutoTokenizer reloads it as one (its config names the class)."""
    tok.save_pretrained(path)
    cfg_file = Path(path) / "tokenizer_config.json"
    cfg = json.loads(cfg_file.read_text())
    cfg["tokenizer_class"] = "ByT5Tokenizer"
    cfg_file.write_text(json.dumps(cfg))


def build_tiny_reward_model(path: str | Path, seed: int = 0) -> str:
    """A 1-layer Qwen2 sequence classifier (one label) with a byte-level tokenizer, saved to ``path``."""
    import torch
    from transformers import ByT5Tokenizer
    from transformers import Qwen2Config
    from transformers import Qwen2ForSequenceClassification

    torch.manual_seed(seed)
    tok = ByT5Tokenizer()
    head: dict[str, Any] = {"num_labels": 1}  # (a PretrainedConfig argument, which Qwen2Config's types omit)
    config = Qwen2Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, pad_token_id=tok.pad_token_id,
                         max_position_embeddings=512, **head)
    Qwen2ForSequenceClassification(config).save_pretrained(path)
    save_byt5(tok, path)
    return str(path)
