"""A batch on the reward workers: cut into chunks (a prompt's group stays whole), finished per term."""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..execution import group_key

__all__ = ["WorkerTerm", "make_chunks"]


@dataclass(frozen=True)
class WorkerTerm:
    """A term as the workers resolved it: what the driver needs to finish a batch."""

    name: str
    reward: str
    weight: float
    on_failure: str


def make_chunks(batch: Sequence[Mapping[str, Any]], size: int, groups: bool) -> list[list[int]]:
    """Split positions into chunks of about ``size``; with ``groups`` a prompt's group stays whole."""
    if groups:
        by: dict[str, list[int]] = {}
        for i, s in enumerate(batch):
            by.setdefault(group_key(s), []).append(i)
        units = list(by.values())
    else:
        units = [[i] for i in range(len(batch))]
    chunks: list[list[int]] = []
    for unit in units:
        if chunks and len(chunks[-1]) + len(unit) <= size:
            chunks[-1].extend(unit)
        else:
            chunks.append(list(unit))
    return chunks
