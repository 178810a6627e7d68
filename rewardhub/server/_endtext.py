"""The end-of-sequence text that OpenRLHF leaves on a reply, and how ``/get_reward`` takes it off.

OpenRLHF (0.11's ``SingleTurnAgentExecutor.execute``) decodes prompt + reply tokens with
``skip_special_tokens=False``, so a reply reaches ``/get_reward`` with the model's end token on it
(``Paris<|im_end|>``), and an exact-match reward would score a right answer 0.0. The server strips
the run of end texts at the end of each reply: the tokenizer's special tokens when the server is given
a tokenizer (``rewardhub serve --tokenizer NAME_OR_PATH``, loaded once at start, never at import),
else ``--end-token TEXT`` (repeatable), else :data:`DEFAULT_END_TOKENS`, which covers the common chat
templates.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..errors import UsageError

__all__ = ["DEFAULT_END_TOKENS", "EndTrimmer", "tokenizer_end_tokens"]

#: end-of-turn, end-of-text and padding texts of common chat templates (ChatML/Qwen/SmolLM, Llama 2
#: and 3, Mistral, Gemma, Phi-3, DeepSeek, GPT-2/NeoX, T5)
DEFAULT_END_TOKENS: tuple[str, ...] = (
    "<|im_end|>", "<|endoftext|>", "</s>", "<|eot_id|>", "<|end_of_text|>", "<|eom_id|>",
    "<eos>", "<end_of_turn>", "<|end|>", "<|return|>", "<｜end▁of▁sentence｜>",
    "<pad>", "<|pad|>", "[PAD]", "<|finetune_right_pad_id|>",
)


class EndTrimmer:
    """Removes, from the end of a text, every end text of ``tokens`` that closes it, repeatedly
    (``Paris<|im_end|><|endoftext|>`` becomes ``Paris``); nothing else of the text is touched."""

    def __init__(self, tokens: Iterable[str]) -> None:
        # the longest first, so that a token that ends with a shorter one is taken whole
        self.tokens: tuple[str, ...] = tuple(sorted({t for t in tokens if t}, key=len, reverse=True))

    def __call__(self, text: str) -> str:
        while text:
            tok = next((t for t in self.tokens if text.endswith(t)), None)
            if tok is None:
                break
            text = text[: len(text) - len(tok)]
        return text


def tokenizer_end_tokens(name: str) -> list[str]:
    """The special tokens of the Hugging Face tokenizer ``name`` (a folder or a hub name), which
    ``/get_reward`` strips from the end of a reply.

    :raises UsageError: transformers is missing, or the tokenizer cannot be loaded.
    """
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise UsageError(
            f"--tokenizer {name} needs transformers\ninstall it (pip install transformers), or name the "
            "end texts with --end-token TEXT"
        ) from None
    try:
        tok: Any = AutoTokenizer.from_pretrained(name)
    except Exception as exc:  # transformers raises OSError, ValueError, ... with a useful text
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(
            f"--tokenizer {name}: cannot load the tokenizer: {first}\n"
            "give the folder of the model's tokenizer (or its hub name), "
            "or name the end texts with --end-token"
        ) from None
    found = list(getattr(tok, "all_special_tokens", None) or [])
    for added in (getattr(tok, "added_tokens_decoder", None) or {}).values():
        if getattr(added, "special", False):
            found.append(str(added.content))
    for attr in ("eos_token", "pad_token"):
        value = getattr(tok, attr, None)
        if isinstance(value, str):
            found.append(value)
    tokens = sorted(set(found))
    if not tokens:
        raise UsageError(f"--tokenizer {name} has no special tokens to strip\n"
                         "name the end texts with --end-token TEXT")
    return tokens
