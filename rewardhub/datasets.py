"""Reading datasets: JSONL, parquet and folders saved by Hugging Face ``datasets`` (``save_to_disk``).

One reader serves ``rewardhub score`` and the trainer. Rows come out one at a time as plain dicts
(with the file and the row number they came from), read in record batches, so memory stays flat
however many rows a file has. pyarrow is imported only when a parquet or arrow file is read.

Two row formats are understood:

* verl's: ``prompt`` as a list of chat messages ``{role, content}``, ``data_source``,
  ``reward_model: {style, ground_truth}``, ``extra_info``, ``ability``;
* a plain one: ``prompt`` or ``question`` as text, ``answer`` or ``ground_truth``.

:func:`prompt_of` and :func:`answer_of` pick those fields out (``data.prompt_key`` /
``data.answer_key`` name other columns). Anything wrong with the data is a :class:`UsageError`
naming the file, the row and the column.
"""

from __future__ import annotations

import glob
import itertools
import json
import os
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING
from typing import Any

from .errors import UsageError

if TYPE_CHECKING:
    from .execution import Scorer

__all__ = [
    "MISSING",
    "Row",
    "answer_of",
    "count_rows",
    "dig",
    "expand_paths",
    "has_column",
    "input_files",
    "iter_rows",
    "prompt_of",
    "terms_needing",
    "to_sample",
]

BATCH_ROWS = 4096
#: the columns tried, in order, when no key is given
PROMPT_KEYS = ("prompt", "question")
ANSWER_KEYS = ("reward_model.ground_truth", "ground_truth", "answer")


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


#: what :func:`answer_of` returns when a row has no answer column at all
MISSING: Any = _Missing()


@dataclass(frozen=True)
class Row:
    """One row of a data file: where it came from (``file``, 1-based ``number``) and its columns."""

    file: str
    number: int
    data: dict[str, Any]

    @property
    def where(self) -> str:
        return f"{self.file}, row {self.number}"


# ---- files -------------------------------------------------------------------------------------


def expand_paths(paths: str | Sequence[str], key: str = "data") -> list[str]:
    """One or more files or folders (globs allowed), as a list of existing paths.

    :raises UsageError: naming ``key`` when a path does not exist or nothing was given.
    """
    items = [paths] if isinstance(paths, str) else list(paths)
    out: list[str] = []
    for item in items:
        item = os.path.expanduser(str(item))
        if item == "-":
            out.append(item)
            continue
        matches = sorted(glob.glob(item)) if any(c in item for c in "*?[") else [item]
        if not matches or not all(os.path.exists(m) for m in matches):
            raise UsageError(f"{key}: no such file or folder {item!r}\n"
                             "give JSONL or parquet files, or a folder saved by datasets' save_to_disk")
        out.extend(matches)
    if not out:
        raise UsageError(f"{key}: no data files given\ne.g. {key}=train.parquet")
    return out


def iter_rows(
    paths: str | Sequence[str], *, key: str = "data", batch_rows: int = BATCH_ROWS
) -> Iterator[Row]:
    """Every row of ``paths`` in order, streamed; each file read by its content (JSONL, parquet, arrow,
    gzip/bz2/xz-compressed), from a regular file, a pipe or stdin (``-``), without losing a byte.

    :raises UsageError: a missing, empty, unreadable or non-UTF-8 file, or a row that is not an
        object, naming the file and the row.
    """
    from ._datafiles import open_rows

    for path in expand_paths(paths, key):
        if os.path.isdir(path):  # a save_to_disk folder: its shards' rows numbered as one file's
            shards = itertools.chain.from_iterable(open_rows(f, batch_rows) for f in _hf_files(path))
            rows: Iterator[tuple[int, dict[str, Any]]] = enumerate((data for _, data in shards), 1)
        else:
            rows = open_rows(path, batch_rows)
        n = 0
        for n, data in rows:
            yield Row(path, n, data)
        if n == 0:
            raise UsageError(
                f"{path}: the file has no rows\ngive a file with at least one row, or leave it out"
            )


def count_rows(paths: str | Sequence[str], key: str = "data") -> int:
    """How many rows :func:`iter_rows` will yield (parquet from metadata, JSONL by lines); 0 when one of
    ``paths`` can be read only once (stdin, a pipe), which is not read."""
    from ._datafiles import is_regular
    from ._datafiles import kind_of
    from ._datafiles import unreadable

    total = 0
    files = expand_paths(paths, key)
    if not all(is_regular(p) for p in files):
        return 0
    for path in files:
        kind = "hf" if os.path.isdir(path) else kind_of(path)
        if kind == "jsonl":
            with open(path, "rb") as f:
                total += sum(1 for line in f if line.strip())
        elif kind == "parquet":
            from ._extras import require

            pq = require("pyarrow.parquet", f"{path}: reading parquet files", "or give the rows as JSONL")

            try:
                total += pq.ParquetFile(path).metadata.num_rows
            except Exception as exc:  # noqa: BLE001 - pyarrow's errors have no common base we can name
                raise unreadable(path, "parquet", exc) from None
        else:
            total += sum(1 for _ in iter_rows(path, key=key))
    return total


def _hf_files(folder: str) -> list[str]:
    """The arrow files of a ``save_to_disk`` folder, in order."""
    if os.path.exists(os.path.join(folder, "dataset_dict.json")):
        splits = sorted(d for d in os.listdir(folder) if os.path.isdir(os.path.join(folder, d)))
        raise UsageError(f"{folder}: a DatasetDict folder (splits: {', '.join(splits)})\n"
                         f"point at one split, e.g. {os.path.join(folder, splits[0] if splits else 'train')}")
    state = os.path.join(folder, "state.json")
    if os.path.exists(state):
        try:
            with open(state, encoding="utf-8") as f:
                files = [os.path.join(folder, d["filename"]) for d in json.load(f).get("_data_files", [])]
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise UsageError(f"{state}: not a readable datasets state file ({exc})") from None
    else:
        files = sorted(glob.glob(os.path.join(folder, "*.arrow")))
    if not files:
        raise UsageError(
            f"{folder}: a folder, but not one saved by datasets' save_to_disk (no .arrow files)\n"
            "give JSONL or parquet files, or a save_to_disk folder"
        )
    return files


def input_files(paths: str | Sequence[str], key: str = "data") -> list[str]:
    """Every file and folder :func:`iter_rows` reads for ``paths``: the files, and each folder with its
    arrow shards (an output must be none of them, nor inside a folder read)."""
    out: list[str] = []
    for path in expand_paths(paths, key):
        out.append(path)
        if os.path.isdir(path):
            try:
                out.extend(_hf_files(path))
            except UsageError:
                pass
    return out


# ---- columns -----------------------------------------------------------------------------------


def dig(data: Mapping[str, Any], dotted: str, default: Any = None) -> Any:
    """The value at dotted key ``dotted`` of nested mappings ``data`` (``a.b``: key ``b`` of the object
    in ``a``), else ``default``."""
    node: Any = data
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return default
        node = node[part]
    return node


def has_column(data: Mapping[str, Any], dotted: str) -> bool:
    """Whether a row has the column ``dotted`` (``a.b`` for the key ``b`` of the object in ``a``)."""
    return dig(data, dotted, MISSING) is not MISSING


def _columns(data: Mapping[str, Any]) -> str:
    return ", ".join(sorted(str(k) for k in data)) or "(none)"


def prompt_of(row: Row, key: str | None = None) -> str | list[dict[str, str]]:
    """The row's prompt: text, or chat messages (a list of ``{role, content}``).

    :raises UsageError: naming file, row and column when it is missing or neither text nor messages.
    """
    keys = [key] if key else list(PROMPT_KEYS)
    for k in keys:
        value = dig(row.data, k, MISSING)
        if value is not MISSING:
            break
    else:
        raise UsageError(
            f"{row.where}: no column {' or '.join(repr(k) for k in keys)} (the prompt)\n"
            f"the row has: {_columns(row.data)}; name the prompt column with data.prompt_key=COLUMN"
        )
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)) and value and all(
            isinstance(m, Mapping) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in value):
        return [{"role": m["role"], "content": m["content"]} for m in value]
    shown = repr(value)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    raise UsageError(f"{row.where}, column {k!r}: the prompt is neither text nor chat messages ({shown})\n"
                     "a prompt is a string or a list of {role, content} messages")


def answer_of(row: Row, key: str | None = None) -> Any:
    """The row's ground truth (``MISSING`` when it has no such column; ``None`` when it is null)."""
    for k in [key] if key else ANSWER_KEYS:
        value = dig(row.data, k, MISSING)
        if value is not MISSING:
            return value
    return MISSING


def answer_column(key: str | None = None) -> str:
    return repr(key) if key else " or ".join(repr(k) for k in ANSWER_KEYS)


def to_sample(row: Row, *, prompt_key: str | None = None, answer_key: str | None = None) -> dict[str, Any]:
    """A scoring sample from a row of either format: the row's own columns, plus ``ground_truth`` (from
    ``reward_model.ground_truth`` in verl's format) and ``data_source`` / ``extra_info`` when absent.

    The prompt is kept as the row has it (text or messages); a row with no answer gets
    ``ground_truth: None``.
    """
    sample = dict(row.data)
    if "ground_truth" not in sample or answer_key:
        answer = answer_of(row, answer_key)
        sample["ground_truth"] = None if answer is MISSING else answer
    if prompt_key and prompt_key != "prompt":
        value = dig(row.data, prompt_key, MISSING)
        if value is not MISSING:
            sample["prompt"] = value
    elif "prompt" not in sample and "question" in sample:
        sample["prompt"] = sample["question"]
    sample.setdefault("data_source", None)
    if sample.get("extra_info") is None:
        sample["extra_info"] = {}
    if "response" not in sample and "messages" not in sample and isinstance(sample["extra_info"], dict):
        messages = _trace_messages(sample["extra_info"].get("trace"))
        if messages:  # a verifiers trace (or a whole traces.jsonl line) is the conversation
            sample["messages"] = messages
    return sample


def _trace_messages(trace: Any) -> list[dict[str, Any]] | None:
    """The conversation of a verifiers trace as OpenAI chat messages: the path from its first message to
    its last node; a ``traces.jsonl`` line (an episode) gives its one trace's. ``None`` if not a trace."""
    if isinstance(trace, dict) and isinstance(trace.get("traces"), list) and len(trace["traces"]) == 1:
        trace = trace["traces"][0]
    nodes = trace.get("nodes") if isinstance(trace, dict) else None
    if not isinstance(nodes, list) or not nodes or not all(isinstance(n, dict) for n in nodes):
        return None
    path, k, seen = [], len(nodes) - 1, set()
    while isinstance(k, int) and 0 <= k < len(nodes) and k not in seen:
        seen.add(k)
        path.append(nodes[k])
        k = nodes[k].get("parent")
    messages = []
    for node in reversed(path):
        m = node.get("message")
        if not isinstance(m, dict) or "role" not in m:
            return None
        m = dict(m)
        if isinstance(m.get("tool_calls"), list):  # verifiers keeps them flat: id, name, arguments
            m["tool_calls"] = [{"id": c.get("id"), "type": "function",
                                "function": {"name": c.get("name"), "arguments": c.get("arguments")}}
                               if isinstance(c, dict) and "function" not in c else c for c in m["tool_calls"]]
        messages.append(m)
    return messages


def terms_needing(scorer: Scorer) -> list[str]:
    """The names of a scorer's terms whose reward takes a ground truth as a parameter."""
    return [f.name for f in scorer.facts if f.needs_ground_truth]
