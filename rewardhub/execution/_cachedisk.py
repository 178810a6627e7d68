"""The reward cache's file: ``DIR/scores.sqlite``, the scores of earlier runs.

The file is a help, never a risk to a run: a file that is damaged, that belongs to another tool, that
cannot be written (read-only, a full disk) or read, gives one ``WARNING:`` line and the run goes on
without it (reads: every key a miss; writes: kept in memory only). An entry that is not a score
(edited by hand: ``[1e400, {}]``, ``[true, {}]``, ``[NaN, {}]``, another shape) is a miss, called
again and written over, with one warning per run.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from typing import Any

from ..errors import UsageError
from ._routing import say_warning

__all__ = ["Disk", "Stored", "stored_entry"]

Stored = tuple[float | None, dict[str, Any]]
_SCHEMA = ("key", "entry")


def stored_entry(raw: Any) -> Stored | None:
    """An entry as read back: ``(score or None, extras)``, or ``None`` when it is not one."""
    try:
        value = json.loads(raw) if isinstance(raw, (str, bytes)) else raw
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, list) or len(value) != 2 or not isinstance(value[1], dict):
        return None
    score = value[0]
    if score is not None and (type(score) not in (int, float) or not math.isfinite(score)):
        return None  # bool, text, a list, inf, nan
    return (None if score is None else float(score)), value[1]


class Disk:
    """One sqlite file in the cache folder (a connection per use: nothing to close, nothing a forked
    process shares); see the module's docstring for what happens when it fails."""

    def __init__(self, folder: str) -> None:
        if os.path.exists(folder) and not os.path.isdir(folder):
            raise UsageError(f"--cache {folder!r} is a file, not a folder\n"
                             "name a folder (it is made when missing)")
        self.path = os.path.join(folder, "scores.sqlite")
        self.readable = self.writable = True
        self._bad_entries = 0
        try:
            os.makedirs(folder, exist_ok=True)
            tables = {name: [c[1] for c in self._run(f"PRAGMA table_info({name})")]
                      for (name,) in self._run("SELECT name FROM sqlite_master WHERE type = 'table'")}
        except Exception as exc:  # OSError, sqlite3.Error: not a database, no permission, ...
            self._give_up(f"cannot read it ({_why(exc)})")
            return
        if tables and tables != {"scores": list(_SCHEMA)}:
            self._give_up(f"it is not a rewardhub cache (its tables: {', '.join(sorted(tables))})")
            return
        if not tables:
            try:
                self._run("CREATE TABLE IF NOT EXISTS scores (key TEXT PRIMARY KEY, entry TEXT NOT NULL)")
            except Exception as exc:
                self._give_up(f"cannot write it ({_why(exc)})")

    def _give_up(self, why: str, *, reads: bool = True) -> None:
        was = (self.readable, self.writable)
        self.readable = self.readable and not reads
        self.writable = False
        if was != (self.readable, self.writable):
            say_warning(f"the reward cache file {self.path}: {why}; scoring goes on without "
                        f"{'it' if reads else 'writing to it'} (delete the file or name another --cache "
                        "folder)")

    def _run(self, sql: str, rows: Sequence[Sequence[str]] = ((),)) -> list[Any]:
        import sqlite3

        db = sqlite3.connect(self.path, timeout=60)
        try:
            with db:
                if len(rows) == 1:
                    return db.execute(sql, rows[0]).fetchall()
                db.executemany(sql, rows)
                return []
        finally:
            db.close()

    def get(self, keys: Sequence[str]) -> dict[str, Stored]:
        """The entries of ``keys`` that hold a score (others: misses)."""
        found: dict[str, Stored] = {}
        if not self.readable:
            return found
        try:
            for k in range(0, len(keys), 500):  # sqlite's limit on the number of parameters
                part = keys[k:k + 500]
                sql = f"SELECT key, entry FROM scores WHERE key IN ({','.join('?' * len(part))})"
                for key, raw in self._run(sql, [part]):
                    entry = stored_entry(raw)
                    if entry is None:
                        self._bad(raw)
                    else:
                        found[key] = entry
        except Exception as exc:
            self._give_up(f"cannot read it ({_why(exc)})")
            return {}
        return found

    def _bad(self, raw: Any) -> None:
        self._bad_entries += 1
        if self._bad_entries == 1:
            shown = repr(raw)[:80]
            say_warning(f"the reward cache file {self.path} holds an entry that is not a score ({shown}); "
                        "such entries are scored again and written over")

    def put(self, items: Sequence[tuple[str, str]]) -> None:
        if not items or not self.writable:
            return
        try:
            self._run("INSERT OR REPLACE INTO scores (key, entry) VALUES (?, ?)", items)
        except Exception as exc:  # read-only, a full disk, a lock held too long
            self._give_up(f"cannot write it ({_why(exc)})", reads=False)


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
