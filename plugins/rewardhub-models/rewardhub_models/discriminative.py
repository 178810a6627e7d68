"""``reward_model``: a transformers sequence-classification model scores each (prompt, response)."""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from rewardhub.decorator import reward

from ._loading import join_text
from ._loading import load_once
from ._loading import load_tokenizer
from ._loading import settings

__all__ = ["RewardModel", "reward_model"]


class RewardModel:
    """A loaded classifier: ``score(prompts, responses)`` in batches of ``batch_size``."""

    def __init__(self, model_path: str, *, trust_remote_code: bool = False, dtype: str = "float32",
                 device: str = "cpu") -> None:
        import torch
        from transformers import AutoModelForSequenceClassification

        self.tokenizer = load_tokenizer(model_path, trust_remote_code)
        self.model = AutoModelForSequenceClassification.from_pretrained(
            model_path, trust_remote_code=trust_remote_code, dtype=getattr(torch, dtype)).to(device).eval()
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        if self.model.config.pad_token_id is None:
            # the classifier reads the last non-pad token: it must know which id is padding
            self.model.config.pad_token_id = self.tokenizer.pad_token_id
        self.tokenizer.padding_side = "right"
        self.device = device

    def score(self, prompts: Sequence[Any], responses: Sequence[str], *, batch_size: int = 8,
              max_length: int | None = None, template: str = "auto", label: int = -1) -> list[float]:
        import torch

        texts = [join_text(self.tokenizer, p, r, template) for p, r in zip(prompts, responses)]
        out: list[float] = []
        for start in range(0, len(texts), max(1, batch_size)):
            chunk = texts[start:start + max(1, batch_size)]
            enc = self.tokenizer(chunk, return_tensors="pt", padding=True, truncation=max_length is not None,
                                 max_length=max_length, add_special_tokens=False).to(self.device)
            with torch.no_grad():
                logits = self.model(**enc).logits.float()
            if logits.shape[-1] == 1:
                out.extend(logits[:, 0].tolist())
            else:
                out.extend(torch.softmax(logits, dim=-1)[:, label].tolist())
        return out


@reward(name="reward_model", kind="model", capabilities=("reward_model",), cache=True)
def reward_model(
    *,
    prompts: Sequence[Any],
    responses: Sequence[str],
    reward_model: Mapping[str, Any] | None = None,
    model_path: str | None = None,
    batch_size: int | None = None,
    max_length: int | None = None,
    trust_remote_code: bool | None = None,
    template: str = "auto",
    label: int = -1,
    dtype: str = "float32",
    device: str = "auto",
    **kwargs: Any,
) -> list[float]:
    """Score each response with a sequence-classification reward model (its logit, or P(label))."""
    cfg = settings(reward_model, model_path=model_path, batch_size=batch_size, max_length=max_length,
                   trust_remote_code=trust_remote_code)
    rm: RewardModel = load_once(
        RewardModel, cfg["model_path"], bool(cfg.get("trust_remote_code") or False), dtype, device
    )
    return rm.score(prompts, responses, batch_size=int(cfg.get("batch_size") or 8),
                    max_length=cfg.get("max_length"), template=template, label=label)
