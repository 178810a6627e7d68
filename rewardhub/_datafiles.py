"""Data files read by their content, whatever they are called and wherever they come from.

A data file is JSONL, parquet, or arrow IPC (stream or file format, as ``datasets``' ``save_to_disk``
writes), possibly gzip-, bz2- or xz-compressed; it may be a regular file, a pipe (``<(cat d.jsonl)``) or
stdin (``-``). The kind is told from the first bytes, which are peeked at, never consumed, so a pipe loses
nothing. A compressed file or pipe holding parquet or arrow is read into memory (both need to seek);
plain files are read through ordinary reads, never memory-mapped, so a file truncated while it is read is
an error, not a ``SIGBUS``.

Nothing here knows about columns: :mod:`rewardhub.datasets` turns the rows into samples.
"""

from __future__ import annotations

import importlib
import io
import json
import os
import stat
import sys
from collections.abc import Iterable
from collections.abc import Iterator
from typing import Any
from typing import BinaryIO

from .errors import UsageError

__all__ = ["DuplicateKey", "decode_line", "is_regular", "kind_of", "open_rows", "unique_keys", "unreadable"]

#: first bytes of the formats told apart (compressed ones are looked into)
_MAGIC = (
    (b"PAR1", "parquet"),
    (b"ARROW1", "arrow"),
    (b"\xff\xff\xff\xff", "arrow"),  # an IPC stream's continuation marker
    (b"\x1f\x8b", "gzip"),
    (b"BZh", "bz2"),
    (b"\xfd7zXZ\x00", "xz"),
    (b"\x28\xb5\x2f\xfd", "zstd"),
    (b"PK\x03\x04", "zip"),
    (b"\x04\x22\x4d\x18", "lz4"),
)
#: names that promise a binary format (a file so named that holds JSON lines is read as JSON lines)
_BINARY_SUFFIXES = {".parquet": "parquet", ".pq": "parquet", ".arrow": "arrow"}
#: what to tell a user of a container we do not open
_UNPACK = {"zstd": "zstd -d FILE", "zip": "unzip FILE", "lz4": "lz4 -d FILE"}


def is_regular(path: str) -> bool:
    """Whether ``path`` can be read twice (a regular file or a folder): not stdin, a pipe or a device."""
    if path == "-":
        return False
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return stat.S_ISREG(mode) or stat.S_ISDIR(mode)


def _peek(f: Any, n: int = 8) -> bytes:
    """The first ``n`` bytes of a buffered binary stream, left in it."""
    head = f.peek(n)[:n]
    return bytes(head)


def _sniff(head: bytes) -> str:
    for magic, kind in _MAGIC:
        if head.startswith(magic):
            return kind
    return "jsonl"


def _open(path: str) -> BinaryIO:
    if path == "-":
        return sys.stdin.buffer
    try:
        return open(path, "rb")  # noqa: SIM115 - closed by the reader
    except OSError as exc:
        raise UsageError(f"cannot read data file {path!r}: {exc.strerror}") from None


def _decompress(f: BinaryIO, kind: str) -> BinaryIO:
    module = importlib.import_module({"gzip": "gzip", "bz2": "bz2", "xz": "lzma"}[kind])
    return io.BufferedReader(module.open(f, "rb"))


def kind_of(path: str) -> str:
    """What a regular file holds: ``jsonl``, ``parquet`` or ``arrow`` (a compressed one: what is inside,
    e.g. ``gzip+jsonl``). Only for files that can be read twice (see :func:`is_regular`)."""
    with _open(path) as f:
        kind = _sniff(_peek(f))
        if kind in ("gzip", "bz2", "xz"):
            try:
                return f"{kind}+{_sniff(_peek(_decompress(f, kind)))}"
            except (OSError, EOFError, ValueError):
                return kind
        return kind


def unreadable(path: str, what: str, exc: BaseException) -> UsageError:
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return UsageError(
        f"{path}: cannot be read as {what} ({msg})\ncheck that the file is complete and really {what}"
    )


def open_rows(path: str, batch_rows: int) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(row number, row)`` of one data file (not a folder), the kind told by its content."""
    f = _open(path)
    with f:
        kind = _sniff(_peek(f))
        what = kind
        if kind in _UNPACK:
            raise UsageError(f"{path}: a {kind}-compressed file, which rewardhub does not open\n"
                             f"unpack it first ({_UNPACK[kind]}), or compress it with gzip")
        if kind in ("gzip", "bz2", "xz"):
            try:
                f = _decompress(f, kind)
                kind = _sniff(_peek(f))
            except (OSError, EOFError, ValueError) as exc:
                raise unreadable(path, f"{what}-compressed data", exc) from None
            what = f"{what}-compressed {kind}"
            if kind in _UNPACK or kind in ("gzip", "bz2", "xz"):
                raise UsageError(f"{path}: {what} inside {what.split('-')[0]}; unpack it first")
        if kind == "jsonl":
            named = os.path.splitext(path[:-3] if path.lower().endswith(".gz") else path)[1].lower()
            head = _peek(f, 64).lstrip(b"\xef\xbb\xbf \t\r\n")
            if named in _BINARY_SUFFIXES and head and not head.startswith(b"{"):
                raise UsageError(
                    f"{path}: cannot be read as {_BINARY_SUFFIXES[named]} (it does not start as one "
                    f"does: {head[:8]!r}), nor is it JSON lines\n"
                    f"check that the file is complete and really {_BINARY_SUFFIXES[named]}"
                )
            yield from _jsonl_rows(path, f, what)
            return
        source: Any
        pa = _pyarrow(path, kind)  # not installed: the "install the extra" error, before any read
        if what == kind and is_regular(path):
            source = path  # read by pyarrow with seeks, not memory-mapped
        else:
            try:
                source = pa.BufferReader(f.read())  # a pipe or compressed: into memory
            except (OSError, EOFError, ValueError) as exc:
                raise unreadable(path, what, exc) from None
        if kind == "parquet":
            yield from _parquet_rows(path, source, batch_rows, what)
        else:
            yield from batches_to_rows(path, _arrow_batches(path, source), f"{what} (datasets' save_to_disk)")


def _jsonl_rows(path: str, f: BinaryIO, what: str) -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        for n, raw in enumerate(f, 1):
            if n == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]  # a UTF-8 byte-order mark
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                hint = ("it looks like UTF-16 text: convert it, e.g. iconv -f utf-16 -t utf-8"
                        if raw[:2] in (b"\xff\xfe", b"\xfe\xff") or b"\x00" in raw[:8]
                        else "convert the file to UTF-8, e.g. iconv -f latin1 -t utf-8")
                raise UsageError(f"{path}, row {n}: not UTF-8 (byte {exc.start} of the line)\n"
                                 f"nor is it a parquet, arrow or compressed file; {hint}") from None
            if not line.strip():
                continue
            try:
                row = _DECODER.decode(line)
            except DuplicateKey as exc:
                raise UsageError(
                    f"{path}, row {n}: the key {exc.args[0]!r} appears twice in one object; a row can hold "
                    "only one of its values\nrename one of them"
                ) from None
            except json.JSONDecodeError as exc:
                raise UsageError(f"{path}, row {n}: not valid JSON ({exc.msg})\n"
                                 "each line must be one JSON object") from None
            except RecursionError:
                raise UsageError(f"{path}, row {n}: JSON nested too deeply") from None
            if not isinstance(row, dict):
                raise UsageError(f"{path}, row {n}: a JSON {type(row).__name__}, not an object\n"
                                 "each line must be one JSON object")
            yield n, row
    except (OSError, EOFError) as exc:  # reading f: a truncated or corrupt gzip stream, say
        raise unreadable(path, what, exc) from None


class DuplicateKey(ValueError):
    """An object with a key given twice (JSON allows it; a row cannot hold both values): ``args[0]``."""


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object as a dict, refusing a key given twice (``json`` would keep the last one silently)."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        raise DuplicateKey(next(k for k, _ in pairs if k in seen or seen.add(k)))  # type: ignore[func-returns-value]
    return obj


#: one decoder for every line (``json.loads`` with a hook would build a decoder per call)
_DECODER = json.JSONDecoder(object_pairs_hook=unique_keys)


def decode_line(line: str) -> Any:
    """One JSON line, decoded as a JSONL file's lines are (a key given twice is a ``ValueError``)."""
    return _DECODER.decode(line)


def _pyarrow(path: str, kind: str) -> Any:
    from ._extras import require

    return require("pyarrow", f"{path}: reading {kind} files", "or give the rows as JSONL")


def _duplicates(path: str, schema: Any) -> None:
    """Refuse a schema with two columns (or two fields of one struct) of the same name: a row as a dict
    would silently keep one of them."""
    import pyarrow as pa

    def walk(fields: Iterable[Any], where: str) -> None:
        seen: set[str] = set()
        for field in fields:
            if field.name in seen:
                raise UsageError(
                    f"{path}: two columns named {where + field.name!r}; a row can hold only one of them\n"
                    "rename one of the columns (e.g. with pyarrow's Table.rename_columns)"
                )
            seen.add(field.name)
            t = field.type
            while pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
                t = t.value_type
            if pa.types.is_struct(t):
                walk(list(t), f"{where}{field.name}.")

    walk(list(schema), "")


def batches_to_rows(path: str, batches: Iterable[Any], what: str) -> Iterator[tuple[int, dict[str, Any]]]:
    n = 0
    it = iter(batches)
    checked = None
    while True:
        try:
            batch = next(it)
            if batch.schema is not checked:
                _duplicates(path, batch.schema)
                checked = batch.schema
            rows = batch.to_pylist()
        except StopIteration:
            return
        except UsageError:
            raise
        except UnicodeDecodeError as exc:
            raise UsageError(f"{path}, row {n + 1}+: a text column is not UTF-8 ({exc.reason})\n"
                             "rewrite the column as UTF-8 text") from None
        except Exception as exc:  # noqa: BLE001 - pyarrow raises ArrowInvalid, OSError, ...
            raise unreadable(path, what, exc) from None
        for row in rows:
            n += 1
            yield n, row


def _parquet_rows(path: str, source: Any, batch_rows: int, what: str) -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        import pyarrow.parquet as pq

        pf = pq.ParquetFile(source)
        _duplicates(path, pf.schema_arrow)
    except UsageError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise unreadable(path, what, exc) from None
    yield from batches_to_rows(path, pf.iter_batches(batch_size=batch_rows), what)


def _arrow_batches(path: str, source: Any) -> Iterator[Any]:
    """The record batches of an arrow IPC stream or file, read (not memory-mapped) from ``source``."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    f = pa.OSFile(source) if isinstance(source, str) else source
    try:
        try:
            reader: Any = ipc.open_stream(f)
        except pa.ArrowInvalid:  # not a stream: the file format
            f.seek(0)
            reader = ipc.open_file(f)
            for i in range(reader.num_record_batches):
                yield reader.get_batch(i)
            return
        yield from reader
    finally:
        if isinstance(source, str):
            f.close()
