"""Scored rows to a parquet file, every input column kept with its values unchanged.

Each chunk of rows becomes an arrow table whose types are inferred from the values alone (inference
never rounds: ``1`` and ``2.5`` in one column make it a double column). The file's schema is the union
of the chunks' schemas, widened as later rows need (a column that first appears at row 301, a struct
that gains a key, an integer column that later holds ``300.5``, nulls first and values later); when it
widens, the row groups written so far are rewritten in the wider schema (a cast that checks every
value: an integer a double cannot hold exactly is an error, not a rounding). What parquet cannot hold
(an integer beyond 64 bits, a column of mixed kinds such as numbers and text, objects that are always
empty) is one :class:`~rewardhub.errors.UsageError` naming the column and the row; the output is then
left as it was.

The result columns have fixed types: ``score`` a double, ``rewards`` a struct of doubles, ``extra``,
``errors`` and ``error_kinds`` JSON text (under ``--namespace`` the five are one struct column).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from collections.abc import Mapping
from typing import Any

from ..errors import UsageError

__all__ = ["ParquetRows"]

_HINT = "write JSONL instead (-o FILE.jsonl), which keeps any JSON value"


def _empty_struct(t: Any) -> bool:
    """Whether the arrow type ``t`` has a struct without fields anywhere in it (parquet cannot store one)."""
    import pyarrow as pa

    if pa.types.is_struct(t):
        return t.num_fields == 0 or any(_empty_struct(f.type) for f in t)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _empty_struct(t.value_type)
    if pa.types.is_map(t):
        return _empty_struct(t.key_type) or _empty_struct(t.item_type)
    return False


class ParquetRows:
    """Rows to ``tmp`` (the output's temporary file), or, with ``tmp`` None (a fifo or device that cannot be
    rewritten), to ``out`` in one go at the end; ``path`` names the output in messages; the results are
    under the column ``namespace``, else the top-level columns ``score``, ``rewards``, ``extra``,
    ``errors``."""

    def __init__(self, tmp: str | None, path: str, out: Any = None, namespace: str | None = None) -> None:
        self.tmp, self.path, self.out, self.namespace = tmp, path, out, namespace
        self.rows = 0  # rows handed in
        self._writer: Any = None
        self._schema: Any = None
        self._pending: list[Any] = []  # tables not written yet (the schema cannot be written yet, or no tmp)

    # ---- rows -> a table ----------------------------------------------------------------------

    def _array(self, name: str, values: list[Any], offset: int) -> Any:
        import pyarrow as pa

        try:
            return self._checked(name, values, pa.array(values), offset)
        except OverflowError:
            if all(v is None or (type(v) is int and 0 <= v < 2**64) for v in values):
                return pa.array(values, pa.uint64())  # unsigned 64-bit numbers (a parquet uint64 column's)
            why = "numbers beyond 64 bits"
        except (
            pa.ArrowInvalid,
            pa.ArrowTypeError,
            pa.ArrowNotImplementedError,
            TypeError,
            ValueError,
        ) as exc:
            why = str(exc)
        for i, v in enumerate(values):  # the first row that fails alone, if any
            try:
                pa.array([v])
            except OverflowError:
                raise UsageError(
                    f"-o {self.path}: column {name!r}, row {offset + i + 1}: a number too large for "
                    f"parquet's 64-bit integers ({str(v)[:40]})\n{_HINT}"
                ) from None
            except Exception as one:  # noqa: BLE001 - pyarrow's errors have no common base
                raise UsageError(
                    f"-o {self.path}: column {name!r}, row {offset + i + 1}: parquet cannot store "
                    f"this value ({one})\n{_HINT}"
                ) from None
        raise UsageError(f"-o {self.path}: column {name!r} (rows {offset + 1}-{offset + len(values)}) mixes "
                         f"values parquet cannot put in one column ({why})\n{_HINT}")

    def _checked(self, name: str, values: list[Any], arr: Any, offset: int) -> Any:
        """``arr``, after checking that it holds ``values`` (pyarrow's inference makes naive and aware
        times one kind, for one)."""
        for i, v, g in _changed(values, arr):
            raise UsageError(
                f"-o {self.path}: column {name!r}, row {offset + i + 1}: parquet would store "
                f"{str(v)[:60]!r} as {str(g)[:60]!r} (the column's other rows make it {arr.type})\n{_HINT}"
            )
        return arr

    def _table(self, rows: list[Mapping[str, Any]]) -> Any:
        import pyarrow as pa

        names: dict[str, None] = {}
        for r in rows:
            names.update(dict.fromkeys(r))
        arrays, fields = [], []
        for name in names:
            values = [r.get(name) for r in rows]
            if self.namespace is None and name in _RESULTS:
                arr = _result_column(name, values)
            elif name == self.namespace:
                arr = pa.StructArray.from_arrays(
                    [_result_column(k, [(v or {}).get(k) for v in values]) for k in _RESULTS],
                    names=list(_RESULTS),
                )
            else:
                arr = self._array(name, values, self.rows)
            arrays.append(arr)
            fields.append(pa.field(name, arr.type))
        return pa.Table.from_arrays(arrays, schema=pa.schema(fields))

    # ---- schemas --------------------------------------------------------------------------------

    def _unify(self, new: Any) -> Any:
        import pyarrow as pa

        if self._schema is None:
            return new
        try:
            return pa.unify_schemas([self._schema, new], promote_options="permissive")
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
            col = next((f.name for f in new if f.name in self._schema.names
                        and self._schema.field(f.name).type != f.type), "?")
            was = self._schema.field(col).type if col in self._schema.names else "?"
            now = new.field(col).type if col in new.names else "?"
            raise UsageError(
                f"-o {self.path}: column {col!r} holds {was} values up to row {self.rows} and {now} "
                f"values in rows {self.rows + 1}-; parquet needs one type per column ({exc})\n"
                f"{_HINT}"
            ) from None

    def _conform(self, table: Any, schema: Any) -> Any:
        """``table`` in ``schema``: missing columns null, every value cast with checks (never rounded)."""
        import pyarrow as pa

        cols = []
        have = dict(zip(table.column_names, table.columns))  # by name once: a row may have 10k columns
        for field in schema:
            col = have.get(field.name)
            if col is not None:
                if col.type != field.type:
                    try:
                        col = col.cast(field.type, safe=True)
                    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
                        raise UsageError(
                            f"-o {self.path}: column {field.name!r}: its values cannot all be written "
                            f"as {field.type} without changing them ({exc})\n{_HINT}"
                        ) from None
                    for _, v, g in _changed(have[field.name].to_pylist(), col):  # text -> bytes, say
                        raise UsageError(
                            f"-o {self.path}: column {field.name!r} holds {have[field.name].type} values "
                            f"in some rows and {field.type} in others; as one column {str(v)[:40]!r} "
                            f"would become {str(g)[:40]!r}\n{_HINT}"
                        )
                cols.append(col)
            else:
                cols.append(pa.nulls(table.num_rows, field.type))
        return pa.Table.from_arrays(cols, schema=schema)

    # ---- writing ----------------------------------------------------------------------------------

    def write(self, rows: list[Mapping[str, Any]]) -> None:
        if not rows:
            return
        table = self._table(rows)
        schema = self._unify(table.schema)
        if self._schema is not None and not schema.equals(self._schema) and self._writer is not None:
            self._rewrite(schema)
        self._schema = schema
        self._pending.append(table)
        self.rows += len(rows)
        if self.tmp is not None and not any(_empty_struct(f.type) for f in schema):
            self._flush()

    def _flush(self) -> None:
        import pyarrow.parquet as pq

        if self._writer is None:
            self._writer = pq.ParquetWriter(self.tmp if self.tmp is not None else self.out, self._schema)
        for table in self._pending:
            self._writer.write_table(self._conform(table, self._schema))
        self._pending = []

    def _rewrite(self, schema: Any) -> None:
        """The rows written so far, again, in the wider ``schema`` (checked casts)."""
        import pyarrow.parquet as pq

        assert self.tmp is not None
        self._writer.close()
        self._writer = None
        wider = f"{self.tmp}.wider"
        writer = pq.ParquetWriter(wider, schema)
        try:
            old = pq.ParquetFile(self.tmp)
            for i in range(old.num_row_groups):
                writer.write_table(self._conform(old.read_row_group(i), schema))
            old.close()
            os.replace(wider, self.tmp)  # the writer goes on writing to the file, now named tmp
        except BaseException:
            writer.close()
            if os.path.exists(wider):
                os.unlink(wider)
            raise
        self._writer = writer

    def close(self, complete: bool = True) -> None:
        """Write what is pending; ``complete`` False (an interrupted run): keep what can be kept."""
        bad = [f.name for f in self._schema if _empty_struct(f.type)] if self._pending else []
        if self._pending and not bad:
            self._flush()
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if bad and complete:
            raise UsageError(f"-o {self.path}: column {bad[0]!r} holds only empty objects ({{}}), "
                             f"which parquet cannot store\n{_HINT}")


_RESULTS = ("score", "rewards", "extra", "errors", "error_kinds")


def _changed(values: list[Any], arr: Any) -> Iterator[tuple[int, Any, Any]]:
    """``(index, value, as read back)`` of the ``values`` that the arrow array ``arr`` does not hold."""
    got = arr.to_pylist()
    if got != values:  # equal as Python values: nothing changed (but maybe int -> float, which is fine)
        yield from ((i, v, g) for i, (v, g) in enumerate(zip(values, got)) if not _holds(v, g))


def _holds(given: Any, got: Any) -> bool:
    """Whether ``got`` (read back from arrow) is ``given``: equal (an int as a double only when the column is
    one of doubles), an object with every key of ``given`` and the others null (a struct's fields are the
    keys of all its rows)."""
    if isinstance(given, dict):
        return isinstance(got, dict) and all(k in got and _holds(v, got[k]) for k, v in given.items()) \
            and all(got[k] is None for k in got.keys() - given.keys())
    if isinstance(given, (list, tuple)):
        return isinstance(got, list) and len(given) == len(got) and all(map(_holds, given, got))
    if isinstance(given, float) and given != given:
        return isinstance(got, float) and got != got
    if given is None or got is None:
        return given is got
    if type(given) is not type(got) and not (type(given) is int and type(got) is float):
        return False
    return bool(given == got)


def _result_column(name: str, values: list[Any]) -> Any:
    """A result column with its fixed type (see the module's docstring)."""
    import pyarrow as pa

    if name == "score":
        return pa.array([None if v is None else float(v) for v in values], pa.float64())
    if name == "rewards":
        keys = sorted({k for v in values for k in (v or {})})
        if not keys:
            return pa.nulls(len(values), pa.struct([("none", pa.float64())]))
        return pa.array(
            [{k: None if (v or {}).get(k) is None else float(v[k]) for k in keys} for v in values],
            pa.struct([(k, pa.float64()) for k in keys]),
        )
    if name == "extra":
        return pa.array([json.dumps(v or {}, sort_keys=True, default=str) for v in values], pa.string())
    return pa.array([json.dumps(v, sort_keys=True, default=str) if v else None for v in values], pa.string())
