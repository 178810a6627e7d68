"""``judge``: a generative reward model. An LLM reads a rubric, the question, the reference answer
and the response, and writes a score, which is parsed from its text."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from rewardhub.decorator import reward

from ._loading import load_once
from ._loading import load_tokenizer
from ._loading import settings

__all__ = ["DEFAULT_RUBRIC", "Judge", "build_prompt", "judge", "parse_score"]

DEFAULT_RUBRIC = (
    "You are grading an answer. Compare the response with the reference answer and rate it from "
    "{low} (wrong) to {high} (fully correct). Reply with one line: Score: <number>."
)

_SCORE_RE = re.compile(r"score\s*[:=]\s*(-?\d+(?:\.\d+)?)", re.IGNORECASE)
_NUMBER_RE = re.compile(r"-?\d+(?:\.\d+)?")


def build_prompt(rubric: str, prompt: Any, response: str, ground_truth: Any, low: float, high: float) -> str:
    question = prompt if isinstance(prompt, str) else "\n".join(
        str(m.get("content", "")) for m in (prompt or []) if isinstance(m, Mapping))
    parts = [rubric.format(low=_fmt(low), high=_fmt(high)), f"Question: {question}"]
    if ground_truth not in (None, ""):
        parts.append(f"Reference answer: {ground_truth}")
    parts.append(f"Response: {response}")
    return "\n\n".join(parts)


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def parse_score(text: str, low: float = 0, high: float = 10) -> float:
    """``Score: N`` (else the first number) mapped from [low, high] to [0, 1]; NaN when there is none
    in range (the runner then applies the term's on_failure policy to that sample)."""
    m = _SCORE_RE.search(text) or _NUMBER_RE.search(text)
    if not m:
        return math.nan
    value = float(m.group(1) if m.re is _SCORE_RE else m.group(0))
    if not low <= value <= high:
        return math.nan
    return (value - low) / (high - low)


class Judge:
    """A causal LM that answers judging prompts greedily (deterministic scores)."""

    def __init__(self, model_path: str, *, trust_remote_code: bool = False, dtype: str = "float32",
                 device: str = "cpu") -> None:
        import torch
        from transformers import AutoModelForCausalLM

        self.tokenizer = load_tokenizer(model_path, trust_remote_code)
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.tokenizer.padding_side = "left"  # generation continues from the right end
        model: Any = AutoModelForCausalLM.from_pretrained(
            model_path, trust_remote_code=trust_remote_code, dtype=getattr(torch, dtype))
        self.model = model.to(device).eval()  # (transformers types .to() as taking a model)
        self.device = device

    def format(self, text: str) -> str:
        if getattr(self.tokenizer, "chat_template", None):
            return str(self.tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                                          add_generation_prompt=True, tokenize=False))
        return text + "\n"

    def answer(self, texts: Sequence[str], *, max_new_tokens: int = 16, batch_size: int = 8) -> list[str]:
        import torch

        out: list[str] = []
        for start in range(0, len(texts), max(1, batch_size)):
            chunk = [self.format(t) for t in texts[start:start + max(1, batch_size)]]
            enc = self.tokenizer(chunk, return_tensors="pt", padding=True, add_special_tokens=False).to(
                self.device
            )
            with torch.no_grad():
                gen = self.model.generate(**enc, do_sample=False, max_new_tokens=max_new_tokens,
                                          pad_token_id=self.tokenizer.pad_token_id)
            new = gen[:, enc["input_ids"].shape[1]:]
            out.extend(self.tokenizer.batch_decode(new, skip_special_tokens=True))
        return out


@reward(name="judge", kind="model", capabilities=("reward_model",), cache=True)
def judge(*, prompts: Sequence[Any], responses: Sequence[str], ground_truths: Sequence[Any] | None = None,
          reward_model: Mapping[str, Any] | None = None, model_path: str | None = None,
          rubric: str = DEFAULT_RUBRIC, low: float = 0, high: float = 10, max_new_tokens: int = 16,
          batch_size: int | None = None, trust_remote_code: bool | None = None, dtype: str = "float32",
          device: str = "auto", max_response_chars: int | None = None, **kwargs: Any) -> list[float]:
    """An LLM judge: rubric + question + reference + response -> `Score: N`, scaled to [0, 1].

    ``max_response_chars``: the judge sees at most this many characters of each response (its start),
    so that one very long response cannot make a prompt the model takes minutes over.
    """
    cfg = settings(
        reward_model, model_path=model_path, batch_size=batch_size, trust_remote_code=trust_remote_code
    )
    if high <= low:
        raise ValueError(f"judge high={high!r} must be above low={low!r}")
    gts = list(ground_truths) if ground_truths is not None else [None] * len(responses)
    if max_response_chars is not None:
        responses = [r[:max_response_chars] for r in responses]
    texts = [build_prompt(rubric, p, r, g, low, high) for p, r, g in zip(prompts, responses, gts)]
    model = load_once(Judge, cfg["model_path"], bool(cfg.get("trust_remote_code") or False), dtype, device)
    answers = model.answer(texts, max_new_tokens=max_new_tokens, batch_size=int(cfg.get("batch_size") or 8))
    return [parse_score(a, low, high) for a in answers]
