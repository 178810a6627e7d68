"""Prompt datasets and the deterministic order in which batches are drawn from them.

Batch ``b`` of a run always holds the same prompts (a seeded permutation per epoch), so a resumed
run continues the data order by continuing the batch index.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from typing import Any

from rewardhub.errors import UsageError

from .config import DataConfig

__all__ = ["BUILTIN_PROMPTS", "Prompt", "PromptDataset", "load_dataset"]


@dataclass(frozen=True)
class Prompt:
    """One question with its answer, as the reward runner sees it."""

    question: str
    ground_truth: str
    data_source: str
    extra_info: dict[str, Any] = field(default_factory=dict)


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


def load_dataset(cfg: DataConfig) -> PromptDataset:
    """The dataset that ``data:`` describes."""
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
    raise UsageError(f"data.source: unknown source {cfg.source!r}")
