"""verl ``DataProto`` batches -> rewardhub samples, as verl's ``naive`` reward manager reads them.

Each row's response is its ``responses`` ids up to the row's length: the sum of the last
``responses.shape[-1]`` columns of ``attention_mask`` (what ``naive`` sums; ``prompts`` is not
needed). ``reward_model.ground_truth`` is the ground truth, ``extra_info`` (a dict, or a JSON object
in a string) gets ``tool_extra_fields`` merged in, then ``num_turns`` and
``rollout_reward_scores``, as ``naive`` does. A batch that cannot be read so is refused with one
:class:`VerlBatchError` naming the field, the row and what was there.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from .errors import UsageError

__all__ = ["VerlBatchError", "decode_samples", "response_lengths"]


class VerlBatchError(UsageError):
    """A verl batch that rewardhub's reward manager cannot read (the message names the field)."""


def _short(x: Any) -> str:
    text = repr(x)
    return text if len(text) <= 80 else text[:77] + "..."


def response_lengths(data: Any) -> list[int]:
    """Each row's response length, from ``attention_mask`` over the ``responses`` columns."""
    import torch

    batch: Any = getattr(data, "batch", None)
    keys = set(batch.keys()) if batch is not None else set()
    for field in ("responses", "attention_mask"):
        if field not in keys:
            raise VerlBatchError(
                f"verl batch has no batch[{field!r}] (tensors there: {sorted(keys) or 'none'})\n"
                "rewardhub's reward manager reads responses and attention_mask, as verl's "
                "naive manager does"
            )
    responses, mask = batch["responses"], batch["attention_mask"]
    width = responses.shape[-1] if responses.dim() == 2 else -1
    if width < 0 or mask.dim() != 2 or mask.shape[0] != responses.shape[0] or mask.shape[-1] < width:
        raise VerlBatchError(
            f"verl batch: attention_mask of shape {tuple(mask.shape)} does not cover responses of "
            f"shape {tuple(responses.shape)}\nexpected (rows, prompt + response length) and "
            "(rows, response length)"
        )
    tail = mask[:, mask.shape[-1] - width:]
    if tail.dtype.is_floating_point or tail.dtype.is_complex:
        if not bool(torch.all((tail == 0) | (tail == 1))):
            bad = tail[(tail != 0) & (tail != 1)][0].item()
            raise VerlBatchError(
                f"verl batch: attention_mask ({tail.dtype}) holds {bad!r}, not only 0 and 1\n"
                "it must mark each response token 1 and each pad 0"
            )
    elif tail.dtype != torch.bool and bool(torch.any((tail != 0) & (tail != 1))):
        raise VerlBatchError("verl batch: attention_mask holds values other than 0 and 1\n"
                             "it must mark each response token 1 and each pad 0")
    return [int(n) for n in tail.to(torch.int64).sum(dim=-1).tolist()]


def _mapping(value: Any, field: str, row: int, *, none_ok: bool = True) -> dict[str, Any] | None:
    """A row's dict field: a mapping, a JSON object in a string, or None."""
    if value is None and none_ok:
        return None
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, (str, bytes)):
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = None
        if isinstance(parsed, Mapping):
            return dict(parsed)
        raise VerlBatchError(f"verl batch: non_tensor_batch[{field!r}][{row}] is the string {_short(value)}, "
                             f"not a JSON object\n{field} must be a dict per row (or a JSON object)")
    raise VerlBatchError(f"verl batch: non_tensor_batch[{field!r}][{row}] is {type(value).__name__} "
                         f"{_short(value)}, not a dict\n{field} must be a dict per row")


def _python_value(x: Any) -> Any:
    """numpy arrays and scalars (how verl's object arrays hand values out) as Python values."""
    tolist = getattr(x, "tolist", None)
    if tolist is not None and type(x).__module__ == "numpy":
        return tolist()
    return x


def decode_samples(
    parts: Sequence[Any], tokenizer: Any, reward_fn_key: str = "data_source"
) -> list[dict[str, Any]]:
    """One rewardhub sample per row of each ``DataProto`` in ``parts`` (in order), decoded in one call."""
    ids: list[list[int]] = []
    rows: list[tuple[Mapping[str, Any], int]] = []
    for data in parts:
        lengths = response_lengths(data)
        responses = data.batch["responses"]
        ids += [responses[i][:n].tolist() for i, n in enumerate(lengths)]
        nt = data.non_tensor_batch if data.non_tensor_batch is not None else {}
        rows += [(nt, i) for i in range(len(lengths))]
    texts = _decode(tokenizer, ids) if ids else []
    out = []
    for row, (text, (nt, i)) in enumerate(zip(texts, rows)):
        gt = None
        if "reward_model" in nt:
            rm = _mapping(nt["reward_model"][i], "reward_model", row)
            gt = _python_value(rm.get("ground_truth")) if rm is not None else None
        info = _mapping(nt["extra_info"][i], "extra_info", row) if "extra_info" in nt else None
        info = info if info is not None else {}
        if "tool_extra_fields" in nt:
            tools = _mapping(nt["tool_extra_fields"][i], "tool_extra_fields", row)
            if tools:
                info.update(tools)
        info["num_turns"] = _python_value(nt["__num_turns__"][i]) if "__num_turns__" in nt else None
        info["rollout_reward_scores"] = _python_value(nt["reward_scores"][i]) if "reward_scores" in nt else {}
        out.append(
            {
                "prompt": _python_value(nt["raw_prompt"][i]) if "raw_prompt" in nt else None,
                "response": text,
                "ground_truth": gt,
                "data_source": _python_value(nt[reward_fn_key][i]) if reward_fn_key in nt else None,
                "extra_info": info,
            }
        )
    return out


def _decode(tokenizer: Any, ids: list[list[int]]) -> list[str]:
    batch = getattr(tokenizer, "batch_decode", None)
    if batch is not None:
        return list(batch(ids, skip_special_tokens=True))
    return [tokenizer.decode(x, skip_special_tokens=True) for x in ids]
