"""What every generation engine shares: the :class:`GenerationEngine` protocol, its :class:`Completion`
and :func:`format_prompt` (a module of its own so that the engines import it, not each other)."""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from typing import Protocol

__all__ = ["Completion", "GenerationEngine", "format_prompt"]


@dataclass
class Completion:
    """One sampled response to one prompt."""

    prompt_ids: list[int]
    response_ids: list[int]  #: includes the end-of-sequence token when the model produced one
    logprobs: list[float]  #: one per response token, under the sampling policy (temperature applied)
    text: str  #: the response decoded without special tokens
    finished: bool  #: ended with end-of-sequence (not cut by max_new_tokens)


class GenerationEngine(Protocol):
    """What a rollouter needs from an inference engine."""

    version: int  #: the policy version of the weights now loaded

    def generate(self, prompts: Sequence[str], *, n: int, max_new_tokens: int, temperature: float,
                 top_p: float, seed: int, top_k: int = 0) -> list[list[Completion]]:
        """``n`` completions for each already-formatted prompt, in prompt order."""
        ...

    def load_weights(self, state_dict: Mapping[str, Any], version: int) -> None:
        """Replace the weights with the learner's, now at ``version``."""
        ...

    def format_prompt(self, question: str, template: str, system: str = "") -> str:
        """The text the model sees for ``question`` (chat template or plain)."""
        ...


def format_prompt(tokenizer: Any, question: str, template: str = "auto", system: str = "") -> str:
    """Format ``question`` with the tokenizer's chat template (``chat``/``auto``) or as plain text."""
    has_chat = bool(getattr(tokenizer, "chat_template", None))
    if template == "chat" or (template == "auto" and has_chat):
        if not has_chat:
            raise ValueError("data.template=chat but the tokenizer has no chat template")
        messages = [{"role": "system", "content": system}] if system else []
        messages.append({"role": "user", "content": question})
        return str(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False))
    return f"Question: {question}\nAnswer:"
