"""Scoring with reasoning-gym's own ``score_answer`` functions."""

from __future__ import annotations

import functools
import json
import re
from typing import Any

__all__ = ["extract", "score"]

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_BOXED = re.compile(r"\\boxed\{((?:[^{}]|\{[^{}]*\})*)\}")


@functools.cache
def _scorer(dataset: str) -> Any:
    import reasoning_gym

    if dataset not in reasoning_gym.factory.DATASETS:
        raise ValueError(
            f"unknown reasoning-gym dataset {dataset!r}; "
            f"known: {', '.join(sorted(reasoning_gym.factory.DATASETS)[:20])}, ..."
        )
    return reasoning_gym.get_score_answer_fn(dataset)


def extract(response: str) -> str:
    """The answer part of a response: ``<answer>`` tag, else last ``\\boxed{}``, else all of it."""
    for pattern in (_ANSWER, _BOXED):
        found: list[str] = pattern.findall(response or "")  # one group each: the matched texts
        if found:
            return found[-1].strip()
    return (response or "").strip()


def _metadata(extra_info: Any) -> Any:
    """``extra_info.metadata``: a mapping, or JSON text of one (as the tasks write it)."""
    meta = extra_info.get("metadata") if isinstance(extra_info, dict) else None
    return json.loads(meta) if isinstance(meta, str) else meta


def _dataset_of(data_source: Any, extra_info: Any) -> str:
    meta = _metadata(extra_info)
    if isinstance(meta, dict) and meta.get("source_dataset"):
        return str(meta["source_dataset"])
    if not data_source:
        raise ValueError("reasoning_gym: the sample has no data_source naming its dataset")
    return str(data_source).removeprefix("reasoning_gym/")


def score(*, response: str, ground_truth: Any, prompt: Any = None, data_source: Any = None,
          extra_info: Any = None, dataset: str | None = None, **kwargs: Any) -> float:
    """Score one response with the dataset's ``score_answer`` (0.0 to 1.0)."""
    name = dataset or _dataset_of(data_source, extra_info)
    entry: dict[str, Any] = {"question": prompt, "answer": ground_truth, "metadata": {}}
    if isinstance(extra_info, dict):
        if isinstance(extra_info.get("entry"), dict):
            entry = dict(extra_info["entry"])
        elif isinstance(meta := _metadata(extra_info), dict):
            entry["metadata"] = meta
    scorer = _scorer(name)
    answer = extract(response)
    try:
        return float(scorer(answer, entry))
    except ValueError:
        # some datasets' own parsers raise on an answer they cannot read (prime_factorization's
        # int() on text that is not "p × q"): a wrong answer, not a failed reward call. The gold
        # answer is always readable, so this never hides a broken sample
        if answer == str(entry.get("answer")):
            raise
        return 0.0
