"""Tasks: every reasoning-gym dataset, named as its reward is (``reasoning_gym.chain_sum``)."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from typing import Any

from .plugin import dataset_names

__all__ = ["tasks"]


def _rows(dataset: str, size: int, seed: int) -> Iterator[dict[str, Any]]:
    import reasoning_gym

    for entry in reasoning_gym.create_dataset(dataset, size=size, seed=seed):
        # the metadata as JSON text: its keys differ between datasets and rows, which parquet cannot hold
        meta = json.dumps(entry.get("metadata") or {}, sort_keys=True, default=str)
        yield {"prompt": str(entry["question"]), "ground_truth": str(entry["answer"]),
               "extra_info": {"metadata": meta}}


def tasks() -> list[dict[str, Any]]:
    """One task per dataset of the installed reasoning-gym (listed without importing it)."""
    return [{"name": f"reasoning_gym.{name}", "reward": f"reasoning_gym.{name}",
             "data_source": f"reasoning_gym/{name}", "rows": functools.partial(_rows, name), "size": 100,
             "ability": "reasoning", "summary": f"reasoning-gym {name!r}, generated with --size and --seed"}
            for name in dataset_names()]
