"""Prompt datasets and the deterministic order in which batches are drawn from them.

Batch ``b`` of a run always holds the same prompts (a seeded permutation per epoch), so a resumed
run continues the data order by continuing the batch index.
"""

from __future__ import annotations

import dataclasses
import os
import random
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from typing import TYPE_CHECKING
from typing import Any

from rewardhub.errors import UsageError

from .config import DataConfig

if TYPE_CHECKING:
    from rewardhub.datasets import Row

__all__ = ["BUILTIN_PROMPTS", "Prompt", "PromptDataset", "load_dataset", "load_files", "prompt_chat",
           "render"]


@dataclass(frozen=True)
class Prompt:
    """One question with its answer, as the reward runner sees it."""

    question: str
    ground_truth: Any
    data_source: str
    extra_info: dict[str, Any] = field(default_factory=dict)
    messages: tuple[dict[str, str], ...] | None = None  #: verl's chat-message prompt, when it is one
    text: str = ""  #: what the model sees (template applied, truncated); set by :func:`render`
    #: the chat the model is given (instruction and system prompt in), for trajectory rewards; set by
    #: :func:`render`
    chat: tuple[dict[str, str], ...] = ()
    where: str = ""  #: file and row it came from


#: A tiny built-in prompt list (no dependencies): single-digit sums with their answers.
BUILTIN_PROMPTS: tuple[tuple[str, str], ...] = tuple(
    (f"What is {a} + {b}?", str(a + b)) for a, b in
    [(1, 2), (3, 4), (2, 2), (5, 1), (6, 3), (7, 2), (4, 4), (8, 1),
     (2, 5), (3, 3), (1, 6), (9, 0), (4, 5), (2, 7), (6, 2), (5, 3)]
)


class PromptDataset:
    """A fixed list of prompts, read in a seeded order that is reshuffled every epoch."""

    def __init__(self, items: Sequence[Prompt], seed: int = 0) -> None:
        if not items:
            raise UsageError("data: the dataset is empty\nraise data.size")
        self.items = list(items)
        self.seed = seed
        self._perms: dict[int, list[int]] = {}

    def __len__(self) -> int:
        return len(self.items)

    def _perm(self, epoch: int) -> list[int]:
        if epoch not in self._perms:
            order = list(range(len(self.items)))
            random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
            self._perms[epoch] = order
        return self._perms[epoch]

    def batch(self, index: int, size: int) -> list[tuple[int, Prompt]]:
        """Batch ``index`` of ``size`` prompts as ``(dataset index, prompt)`` pairs."""
        out = []
        for k in range(index * size, (index + 1) * size):
            epoch, pos = divmod(k, len(self.items))
            i = self._perm(epoch)[pos]
            out.append((i, self.items[i]))
        return out


def load_dataset(cfg: DataConfig, needs_answer: Sequence[str] = ()) -> PromptDataset:
    """The dataset that ``data:`` describes (``data.train_files`` when set, else ``data.source``: builtin,
    reasoning_gym, or the name of an installed task, see ``rewardhub tasks``)."""
    if cfg.train_files:
        return PromptDataset(
            load_files(cfg.train_files, cfg, "data.train_files", needs_answer), seed=cfg.seed
        )
    if cfg.source == "builtin":
        items = [Prompt(q, a, "builtin", {"index": i}) for i, (q, a) in enumerate(BUILTIN_PROMPTS)]
        return PromptDataset(items[: cfg.size], seed=cfg.seed)
    if cfg.source == "reasoning_gym":
        try:
            import reasoning_gym
        except ImportError as exc:
            raise UsageError("data.source: reasoning_gym is not installed\n"
                             "pip install reasoning-gym, or use data.source=builtin") from exc
        try:
            ds = reasoning_gym.create_dataset(cfg.dataset, size=cfg.size, seed=cfg.seed,
                                              **dict(cfg.kwargs))
        except Exception as exc:  # reasoning-gym raises plain errors for unknown names/kwargs
            raise UsageError(f"data.dataset: reasoning-gym cannot build {cfg.dataset!r}: {exc}\n"
                             "use e.g. data.dataset=basic_arithmetic") from exc
        items = []
        for i, entry in enumerate(ds):
            meta = {k: v for k, v in dict(entry.get("metadata") or {}).items()
                    if isinstance(v, (str, int, float, bool))}
            items.append(Prompt(str(entry["question"]), str(entry["answer"]),
                                f"reasoning_gym/{cfg.dataset}", {"index": i, **meta}))
        return PromptDataset(items, seed=cfg.seed)
    # any other source is a task (rewardhub.tasks): its rows, exactly as `rewardhub data` writes them
    from rewardhub.datasets import Row
    from rewardhub.tasks import task_rows

    rows = task_rows(cfg.source, cfg.size, cfg.seed)
    where = f"data.source {cfg.source!r}"
    return PromptDataset(
        _prompts((Row(where, i + 1, r) for i, r in enumerate(rows)), cfg, needs_answer), seed=cfg.seed
    )


def load_files(paths: Any, cfg: DataConfig, key: str, needs_answer: Sequence[str] = ()) -> list[Prompt]:
    """The prompts of JSONL/parquet files or ``save_to_disk`` folders, in verl's row format or the plain one.

    :param needs_answer: the reward terms that take a ground truth: a row without one is an error.
    :raises UsageError: naming the file, the row and the column.
    """
    from rewardhub.datasets import iter_rows

    return _prompts(iter_rows(paths, key=key), cfg, needs_answer)


def _prompts(rows: Iterable[Row], cfg: DataConfig, needs_answer: Sequence[str]) -> list[Prompt]:
    from rewardhub.datasets import MISSING
    from rewardhub.datasets import answer_column
    from rewardhub.datasets import answer_of
    from rewardhub.datasets import prompt_of

    items = []
    for row in rows:
        prompt = prompt_of(row, cfg.prompt_key or None)
        answer = answer_of(row, cfg.answer_key or None)
        if needs_answer and answer in (MISSING, None):
            what = "no column" if answer is MISSING else "a null in column"
            raise UsageError(
                f"{row.where}: {what} {answer_column(cfg.answer_key or None)} (the ground truth), "
                f"which reward {needs_answer[0]!r} needs\nthe row has: "
                f"{', '.join(sorted(row.data))}; name the column with data.answer_key=COLUMN"
            )
        extra = row.data.get("extra_info")
        extra = dict(extra) if isinstance(extra, Mapping) else {}
        if isinstance(row.data.get("ability"), str):
            extra.setdefault("ability", row.data["ability"])
        messages = tuple(prompt) if isinstance(prompt, list) else None
        question = prompt if isinstance(prompt, str) else next(
            (m["content"] for m in reversed(prompt) if m["role"] == "user"), prompt[-1]["content"])
        source = row.data.get("data_source")
        items.append(Prompt(question=question, ground_truth=None if answer is MISSING else answer,
                            data_source=str(source) if source is not None else os.path.basename(row.file),
                            extra_info=extra, messages=messages, where=row.where))
    return items


def prompt_chat(p: Prompt, cfg: DataConfig) -> tuple[dict[str, str], ...]:
    """The chat messages the model is given for ``p``: its own (or its question as one user turn), with
    ``data.instruction`` after the last user turn's text and ``data.system`` first where it has none."""
    messages = [dict(m) for m in p.messages] if p.messages is not None else [
        {"role": "user", "content": p.question}]
    if cfg.instruction:
        last = max(i for i, m in enumerate(messages) if m["role"] == "user") if any(
            m["role"] == "user" for m in messages) else len(messages) - 1
        messages[last]["content"] += cfg.instruction
    if cfg.system and not any(m["role"] == "system" for m in messages):
        messages.insert(0, {"role": "system", "content": cfg.system})
    return tuple(messages)


def _format(tokenizer: Any, p: Prompt, cfg: DataConfig) -> str:
    from .engine import format_prompt

    if p.messages is None:
        return format_prompt(tokenizer, p.question + cfg.instruction, cfg.template, cfg.system)
    messages = list(prompt_chat(p, cfg))
    has_chat = bool(getattr(tokenizer, "chat_template", None))
    if cfg.template == "chat" or (cfg.template == "auto" and has_chat):
        if not has_chat:
            raise UsageError("data.template: chat, but the model's tokenizer has no chat template\n"
                             "use data.template=plain (or auto)")
        return str(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False))
    # no chat template: the messages' text, then the plain format's answer cue
    return format_prompt(tokenizer, "\n".join(m["content"] for m in messages if m["role"] != "system"),
                         "plain")


def render(dataset: PromptDataset, tokenizer: Any, cfg: DataConfig, key: str) -> tuple[PromptDataset, int]:
    """Each prompt as the model sees it (``Prompt.text``), held to ``data.max_prompt_length`` tokens.

    Longer prompts are dropped when ``data.filter_overlong_prompts`` (as verl does; their number is
    returned), else cut on ``data.truncation``'s side, or an error naming the row when it is ``error``.
    """
    texts = [_format(tokenizer, p, cfg) for p in dataset.items]
    limit = cfg.max_prompt_length
    if not limit:
        return PromptDataset([dataclasses.replace(p, text=t, chat=prompt_chat(p, cfg))
                              for p, t in zip(dataset.items, texts)], seed=dataset.seed), 0
    kept, filtered = [], 0
    for start in range(0, len(texts), 1024):
        ids = tokenizer(texts[start:start + 1024], add_special_tokens=False)["input_ids"]
        for p, text, tok in zip(dataset.items[start:start + 1024], texts[start:start + 1024], ids):
            if len(tok) <= limit:
                kept.append(dataclasses.replace(p, text=text, chat=prompt_chat(p, cfg)))
                continue
            if cfg.filter_overlong_prompts:
                filtered += 1
                continue
            if cfg.truncation == "error":
                raise UsageError(
                    f"{p.where or key}: the prompt is {len(tok)} tokens, longer than "
                    f"data.max_prompt_length={limit}\nraise it, set data.filter_overlong_prompts=true "
                    "to leave such rows out, or data.truncation=left|right|middle"
                )
            if cfg.truncation == "left":
                tok = tok[-limit:]
            elif cfg.truncation == "right":
                tok = tok[:limit]
            else:
                tok = tok[:limit // 2] + tok[len(tok) - (limit - limit // 2):]
            kept.append(dataclasses.replace(p, text=tokenizer.decode(tok, skip_special_tokens=False),
                                            chat=prompt_chat(p, cfg)))
    if not kept:
        raise UsageError(f"{key}: every prompt is longer than data.max_prompt_length={limit} tokens "
                         f"({filtered} filtered)\nraise data.max_prompt_length")
    return PromptDataset(kept, seed=dataset.seed), filtered
