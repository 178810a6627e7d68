"""verl ``DataProto`` batches -> rewardhub samples, as verl's ``naive`` reward manager reads them.

Each row's response is its ``responses`` ids up to the row's length: the sum of the last
``responses.shape[-1]`` columns of ``attention_mask`` (what ``naive`` sums; ``prompts`` is not
needed). ``reward_model.ground_truth`` is the ground truth (None passed on as None, as ``naive``
passes it), ``extra_info`` (a dict, or a JSON object in a string) gets ``tool_extra_fields`` merged
in, then ``num_turns`` and ``rollout_reward_scores``, as ``naive`` does. A row whose ``raw_prompt`` is
chat messages is a trajectory too: its ``messages`` are the agent loop's conversation
(:func:`~rewardhub.verl.chat.verl_chat`), for the rewards that read it.

A row that cannot be read so fails alone: :func:`read_rows` gives a :class:`VerlBatchError` for it
(naming the field, the row and what was there) in its place, and reads the other rows. verl's agent
loop sends each trajectory as a ``DataProto`` of its own, so one malformed trajectory never costs the
others that arrived with it their scores.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from ..errors import UsageError
from .chat import verl_chat

__all__ = ["NO_GROUND_TRUTH", "VerlBatchError", "read_rows", "row_label", "row_lengths"]


class VerlBatchError(UsageError):
    """A verl batch that rewardhub's reward manager cannot read (the message names the field)."""


def _short(x: Any) -> str:
    text = repr(x)
    return text if len(text) <= 80 else text[:77] + "..."


def _tensors(data: Any) -> tuple[Any, Any]:
    """``responses`` and the columns of ``attention_mask`` over them; one error for the whole part
    when they are missing or their shapes do not fit (no row of it can be read)."""
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
    return responses, mask[:, mask.shape[-1] - width:]


def row_lengths(data: Any) -> list[int | VerlBatchError]:
    """Each row's response length, from ``attention_mask`` over the ``responses`` columns, or the
    error of a row whose mask holds values other than 0 and 1.

    :raises VerlBatchError: when the part has no such tensors (no row can be read).
    """
    import torch

    _, tail = _tensors(data)
    if tail.dtype == torch.bool:
        bad = torch.zeros(tail.shape[0], dtype=torch.bool)
    else:
        bad = ((tail != 0) & (tail != 1)).any(dim=-1)
    sums = tail.to(torch.int64).sum(dim=-1).tolist()
    out: list[int | VerlBatchError] = []
    for i, (n, wrong) in enumerate(zip(sums, bad.tolist())):
        if wrong:
            value = tail[i][(tail[i] != 0) & (tail[i] != 1)][0].item()
            out.append(VerlBatchError(
                f"verl batch: attention_mask ({tail.dtype}) of row {i} holds {value!r}, not only 0 and 1\n"
                "it must mark each response token 1 and each pad 0"))
        else:
            out.append(int(n))
    return out


def _mapping(value: Any, field: str, row: int) -> dict[str, Any] | None:
    """A row's dict field: a mapping, a JSON object in a string, or None."""
    if value is None:
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


#: why a row without ``reward_model.ground_truth`` is not scored by a reward that takes one
NO_GROUND_TRUTH = "no ground truth in this row (reward_model.ground_truth), which this reward needs"


def _ground_truth(nt: Mapping[str, Any], i: int, needed: bool) -> Any:
    """The row's ``reward_model.ground_truth``: None where it is None (as naive passes it). A row
    with no ``ground_truth`` key at all (naive fails on it) is an error when a reward needs one."""
    if "reward_model" not in nt:
        return None
    rm = _mapping(nt["reward_model"][i], "reward_model", i)
    if needed and (rm is None or "ground_truth" not in rm):
        got = "None" if rm is None else f"a dict without 'ground_truth' (keys: {sorted(map(str, rm))})"
        raise VerlBatchError(f"verl batch: non_tensor_batch['reward_model'][{i}] is {got}: {NO_GROUND_TRUTH}")
    return _python_value(rm.get("ground_truth")) if rm is not None else None


def _fields(nt: Mapping[str, Any], i: int, reward_fn_key: str, needs_ground_truth: bool) -> dict[str, Any]:
    """Row ``i``'s sample without its response."""
    info = _mapping(nt["extra_info"][i], "extra_info", i) if "extra_info" in nt else None
    info = info if info is not None else {}
    if "tool_extra_fields" in nt:
        tools = _mapping(nt["tool_extra_fields"][i], "tool_extra_fields", i)
        if tools:
            info.update(tools)
    for key in ("tool_rewards", "turn_scores"):  # a whole batch: the agent loop's extra fields are columns
        if key in nt and key not in info:
            info[key] = _python_value(nt[key][i])
    info["num_turns"] = _python_value(nt["__num_turns__"][i]) if "__num_turns__" in nt else None
    info["rollout_reward_scores"] = _python_value(nt["reward_scores"][i]) if "reward_scores" in nt else {}
    return {
        "prompt": _python_value(nt["raw_prompt"][i]) if "raw_prompt" in nt else None,
        "ground_truth": _ground_truth(nt, i, needs_ground_truth),
        "data_source": _python_value(nt[reward_fn_key][i]) if reward_fn_key in nt else None,
        "extra_info": info,
    }


def row_label(nt: Mapping[str, Any], i: int) -> str:
    """How a message names a row: its uid, data source and ``extra_info`` index where it has them."""
    parts = []
    for key in ("uid", "data_source"):
        if key in nt:
            parts.append(f"{key}={_short(_python_value(nt[key][i]))}")
    info = nt["extra_info"][i] if "extra_info" in nt else None
    if isinstance(info, Mapping) and "index" in info:
        parts.append(f"index={_short(_python_value(info['index']))}")
    return ", ".join(parts) or "no uid, data_source or extra_info index"


def read_rows(
    parts: Sequence[Any], tokenizer: Any, reward_fn_key: str = "data_source", *,
    required: Sequence[str] = (), needs_ground_truth: bool = False,
) -> tuple[list[dict[str, Any] | VerlBatchError], list[str]]:
    """One rewardhub sample per row of each ``DataProto`` in ``parts`` (in order, decoded in one
    call), or the :class:`VerlBatchError` of a row that cannot be read; and each row's label.

    :param required: ``non_tensor_batch`` fields every row needs (a part without one: each of its
        rows fails with an error naming the field).
    :param needs_ground_truth: a row whose ``reward_model`` has no ``ground_truth`` key fails.
    """
    out: list[dict[str, Any] | VerlBatchError] = []
    labels: list[str] = []
    ids: list[list[int]] = []
    where: list[int] = []
    for data in parts:
        nt = data.non_tensor_batch if data.non_tensor_batch is not None else {}
        n = len(data)
        labels += [_safe_label(nt, i) for i in range(n)]
        try:
            lengths = row_lengths(data)
            absent = [f for f in required if f not in nt]
            if absent:
                raise VerlBatchError(
                    f"verl batch has no non_tensor_batch[{absent[0]!r}]\nfields there: {sorted(nt) or 'none'}"
                    + _REQUIRED_WHY.get(absent[0], "")
                )
        except VerlBatchError as exc:
            out += [exc] * n
            continue
        responses = data.batch["responses"]
        for i, length in enumerate(lengths):
            try:
                if isinstance(length, VerlBatchError):
                    raise length
                sample = _fields(nt, i, reward_fn_key, needs_ground_truth)
            except VerlBatchError as exc:
                out.append(exc)
                continue
            ids.append(responses[i][:length].tolist())
            where.append(len(out))
            out.append(sample)
    for k, text in zip(where, _decode(tokenizer, ids)):
        read = out[k]
        if isinstance(text, VerlBatchError):
            out[k] = text
        elif not isinstance(read, VerlBatchError):
            read["response"] = text
            if isinstance(read["prompt"], list):
                read["messages"] = verl_chat(read["prompt"], text)
    return out, labels


#: the rest of the message for a required field that a part lacks
_REQUIRED_WHY = {
    "reward_model": "\nverl's datasets carry the ground truth as reward_model: {ground_truth: ...}",
    "data_source": "\nverl's default scorer picks its function by it; or name a "
                   "reward.custom_reward_function",
}


def _safe_label(nt: Mapping[str, Any], i: int) -> str:
    try:
        return row_label(nt, i)
    except Exception:  # noqa: BLE001 - a malformed row still gets a label
        return f"row {i}"


def _decode(tokenizer: Any, ids: list[list[int]]) -> list[str | VerlBatchError]:
    """The texts, in one call; a row the tokenizer cannot decode gets the error (the others their text)."""
    if not ids:
        return []
    batch = getattr(tokenizer, "batch_decode", None)
    if batch is not None:
        try:
            return list(batch(ids, skip_special_tokens=True))
        except Exception:  # noqa: BLE001 - find the row it was, below
            pass
    out: list[str | VerlBatchError] = []
    for i, x in enumerate(ids):
        try:
            out.append(tokenizer.decode(x, skip_special_tokens=True))
        except Exception as exc:  # noqa: BLE001 - that row fails alone
            out.append(VerlBatchError(f"verl batch: the tokenizer cannot decode the response of row {i}: "
                                      f"{type(exc).__name__}: {exc}"))
    return out
