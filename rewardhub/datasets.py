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
import json
import os
from collections.abc import Collection
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .errors import UsageError

__all__ = [
    "MISSING",
    "Row",
    "answer_of",
    "count_rows",
    "expand_paths",
    "iter_rows",
    "prompt_of",
    "terms_needing",
    "to_sample",
]

BATCH_ROWS = 4096
JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")
PARQUET_SUFFIXES = (".parquet", ".pq")
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


def _kind(path: str) -> str:
    if os.path.isdir(path):
        return "hf"
    lower = path.lower()
    if lower.endswith(PARQUET_SUFFIXES):
        return "parquet"
    if lower.endswith(".arrow"):
        return "arrow"
    if lower.endswith(JSONL_SUFFIXES) or path == "-":
        return "jsonl"
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError as exc:
        raise UsageError(f"cannot read data file {path!r}: {exc.strerror}") from None
    return "parquet" if head == b"PAR1" else "jsonl"


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


def iter_rows(paths: str | Sequence[str], *, key: str = "data", batch_rows: int = BATCH_ROWS) -> Iterator[Row]:
    """Every row of ``paths`` in order, streamed.

    :raises UsageError: a missing, empty, unreadable or non-UTF-8 file, or a row that is not an
        object, naming the file and the row.
    """
    for path in expand_paths(paths, key):
        kind = _kind(path)
        if kind == "jsonl":
            rows = _jsonl_rows(path)
        elif kind == "parquet":
            rows = _parquet_rows(path, batch_rows)
        elif kind == "arrow":
            rows = _arrow_rows(path, [path], batch_rows)
        else:
            rows = _arrow_rows(path, _hf_files(path), batch_rows)
        empty = True
        for row in rows:
            empty = False
            yield row
        if empty:
            raise UsageError(f"{path}: the file has no rows\ngive a file with at least one row, or leave it out")


def count_rows(paths: str | Sequence[str], key: str = "data") -> int:
    """How many rows :func:`iter_rows` will yield (parquet/arrow from metadata, JSONL by lines)."""
    total = 0
    for path in expand_paths(paths, key):
        kind = _kind(path)
        if kind == "jsonl":
            if path == "-":
                return 0
            with open(path, "rb") as f:
                total += sum(1 for line in f if line.strip())
        elif kind == "parquet":
            pq = _pyarrow(path, "parquet")
            try:
                total += pq.ParquetFile(path).metadata.num_rows
            except Exception as exc:  # noqa: BLE001 - pyarrow's errors have no common base we can name
                raise _unreadable(path, "parquet", exc) from None
        else:
            total += sum(1 for _ in iter_rows(path, key=key))
    return total


def _unreadable(path: str, what: str, exc: BaseException) -> UsageError:
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return UsageError(f"{path}: cannot be read as {what} ({msg})\ncheck that the file is complete and really {what}")


def _jsonl_rows(path: str) -> Iterator[Row]:
    import sys

    try:
        f = sys.stdin.buffer if path == "-" else open(path, "rb")
    except OSError as exc:
        raise UsageError(f"cannot read data file {path!r}: {exc.strerror}") from None
    with f:
        for n, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise UsageError(f"{path}, row {n}: not UTF-8 (byte {exc.start} of the line)\n"
                                 "convert the file to UTF-8, e.g. iconv -f latin1 -t utf-8") from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UsageError(f"{path}, row {n}: not valid JSON ({exc.msg})\n"
                                 "each line must be one JSON object") from None
            except RecursionError:
                raise UsageError(f"{path}, row {n}: JSON nested too deeply") from None
            if not isinstance(row, dict):
                raise UsageError(f"{path}, row {n}: a JSON {type(row).__name__}, not an object\n"
                                 "each line must be one JSON object")
            yield Row(path, n, row)


def _pyarrow(path: str, module: str) -> Any:
    try:
        if module == "parquet":
            import pyarrow.parquet as pq

            return pq
        import pyarrow.ipc as ipc

        return ipc
    except ImportError:
        raise UsageError(f"{path}: reading {module} files needs pyarrow\npip install pyarrow") from None


def _batches_to_rows(path: str, batches: Iterable[Any], what: str) -> Iterator[Row]:
    n = 0
    it = iter(batches)
    while True:
        try:
            batch = next(it)
            rows = batch.to_pylist()
        except StopIteration:
            return
        except UnicodeDecodeError as exc:
            raise UsageError(f"{path}, row {n + 1}+: a text column is not UTF-8 ({exc.reason})\n"
                             "rewrite the column as UTF-8 text") from None
        except Exception as exc:  # noqa: BLE001 - pyarrow raises ArrowInvalid, OSError, ...
            raise _unreadable(path, what, exc) from None
        for row in rows:
            n += 1
            yield Row(path, n, row)


def _parquet_rows(path: str, batch_rows: int) -> Iterator[Row]:
    pq = _pyarrow(path, "parquet")
    try:
        pf = pq.ParquetFile(path)
    except Exception as exc:  # noqa: BLE001
        raise _unreadable(path, "parquet", exc) from None
    yield from _batches_to_rows(path, pf.iter_batches(batch_size=batch_rows), "parquet")


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
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise UsageError(f"{state}: not a readable datasets state file ({exc})") from None
    else:
        files = sorted(glob.glob(os.path.join(folder, "*.arrow")))
    if not files:
        raise UsageError(f"{folder}: a folder, but not one saved by datasets' save_to_disk (no .arrow files)\n"
                         "give JSONL or parquet files, or a save_to_disk folder")
    return files


def _arrow_rows(path: str, files: list[str], batch_rows: int) -> Iterator[Row]:
    """Rows of arrow IPC files (``save_to_disk`` writes the stream format; the file format is read too)."""
    ipc = _pyarrow(path, "arrow")
    import pyarrow as pa

    n = 0
    for file in files:
        try:
            source = pa.memory_map(file)
            try:
                reader: Any = ipc.open_stream(source)
                batches: Iterable[Any] = reader
            except pa.ArrowInvalid:
                source = pa.memory_map(file)
                reader = ipc.open_file(source)
                batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
        except Exception as exc:  # noqa: BLE001
            raise _unreadable(file, "arrow (datasets' save_to_disk)", exc) from None
        for row in _batches_to_rows(file, batches, "arrow"):
            n += 1
            yield Row(path, n, row.data)


# ---- columns -----------------------------------------------------------------------------------


def _get(data: Mapping[str, Any], dotted: str) -> Any:
    node: Any = data
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return MISSING
        node = node[part]
    return node


def _columns(data: Mapping[str, Any]) -> str:
    return ", ".join(sorted(str(k) for k in data)) or "(none)"


def prompt_of(row: Row, key: str | None = None) -> str | list[dict[str, str]]:
    """The row's prompt: text, or chat messages (a list of ``{role, content}``).

    :raises UsageError: naming file, row and column when it is missing or neither text nor messages.
    """
    keys = [key] if key else list(PROMPT_KEYS)
    for k in keys:
        value = _get(row.data, k)
        if value is not MISSING:
            break
    else:
        raise UsageError(f"{row.where}: no column {' or '.join(repr(k) for k in keys)} (the prompt)\n"
                         f"the row has: {_columns(row.data)}; name the prompt column with data.prompt_key=COLUMN")
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
        value = _get(row.data, k)
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
        value = _get(row.data, prompt_key)
        if value is not MISSING:
            sample["prompt"] = value
    elif "prompt" not in sample and "question" in sample:
        sample["prompt"] = sample["question"]
    sample.setdefault("data_source", None)
    if sample.get("extra_info") is None:
        sample["extra_info"] = {}
    return sample


def terms_needing(runner: Any, field: str = "ground_truth") -> list[str]:
    """The names of a runner's terms whose reward takes ``field`` (``ground_truth``) as a parameter."""
    names = []
    for term in getattr(runner, "terms", []):
        params: Collection[str] = getattr(term.invoker, "names", set())
        if field in params or field + "s" in params:
            names.append(term.name)
    return names
