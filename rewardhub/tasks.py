"""Tasks: a dataset and the reward terms that score it, under one name (entry-point group
``rewardhub.tasks``).

A task package needs no rewardhub. Its entry point names a plain mapping, or a callable that returns
one mapping or a list of them (one entry point may declare many tasks without importing its data
library)::

    {"name": "my_pkg.sums",           # default: the entry point's name
     "reward": "math_verify",         # a reward name, a config term mapping, or a list of them
     "rows": make_rows,               # a generator: make_rows(size, seed) -> rows; or
     "file": "sums.jsonl",            # a JSONL/parquet file (relative to the module's folder); or
     "hf": "openai/gsm8k", "hf_kwargs": {"name": "main", "split": "train"},   # datasets.load_dataset
     "data_source": "my_pkg.sums",    # default: the task's name
     "size": 100,                     # a generator's default size
     "ability": "math", "summary": "..."}

A row is given in either row format :mod:`rewardhub.datasets` reads, and comes out in verl's:
``data_source``, ``prompt`` (chat messages), ``ability``, ``reward_model: {style, ground_truth}`` and
``extra_info`` (``index`` first). ``rewardhub score``, the trainer, TRL and verl read those rows as
they are.
"""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import Any

from .errors import UsageError

__all__ = ["RewardTask", "get_task", "iter_task_rows", "list_tasks", "task_rows", "write_rows"]

_KINDS = ("rows", "file", "hf")


@dataclass(frozen=True)
class RewardTask:
    """One task: where its rows come from (``kind``: rows | file | hf | broken | duplicate: two packages
    register the name, ``summary`` names them) and its reward terms."""

    name: str
    rewards: tuple[dict[str, Any], ...]
    data_source: str
    kind: str
    dist: str | None = None
    version: str | None = None
    summary: str = ""
    size: int | None = None  #: a generator's default size (files: counted when asked)
    ability: str = ""
    decl: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    where: str = ""  #: the folder a relative ``file`` is read from

    @property
    def reward_section(self) -> dict[str, Any]:
        """The ``reward:`` section that scores this task's rows."""
        return {"rewards": [dict(t) for t in self.rewards]}


def _terms(reward: Any, origin: str) -> tuple[dict[str, Any], ...]:
    items = reward if isinstance(reward, (list, tuple)) else [reward]
    terms = tuple({"name": t} if isinstance(t, str) else dict(t)
                  for t in items if isinstance(t, (str, Mapping)))
    if not items or len(terms) != len(items):
        raise UsageError(f"{origin}: 'reward' must be a reward name, a term mapping or a list of them, "
                         f"not {reward!r}")
    return terms


def _task(decl: Any, default_name: str, ep: Any, where: str) -> RewardTask:
    origin = f"task entry point {ep.name} = {ep.value} ({ep.dist} {ep.version})"
    if not isinstance(decl, Mapping):
        raise UsageError(f"{origin}: a task is a mapping, not {type(decl).__name__}")
    kinds = [k for k in _KINDS if decl.get(k) is not None]
    if len(kinds) != 1:
        raise UsageError(f"{origin}: a task has exactly one of 'rows' (a generator), 'file' or 'hf'"
                         f" (it has {', '.join(kinds) or 'none'})")
    name = str(decl.get("name") or default_name)
    size = decl.get("size")
    if kinds == ["file"]:  # a file's rows are counted (from metadata for parquet)
        from .datasets import count_rows

        size = count_rows(os.path.join(where, str(decl["file"])), key=f"task {name!r}")
    return RewardTask(name=name, rewards=_terms(decl.get("reward"), origin),
                data_source=str(decl.get("data_source") or name), kind=kinds[0], dist=ep.dist,
                version=ep.version, summary=str(decl.get("summary") or ""),
                size=size if isinstance(size, int) else None, ability=str(decl.get("ability") or ""),
                decl=decl, where=where)


def list_tasks() -> list[RewardTask]:
    """Every installed task, sorted by name; an entry point that fails to load is a ``broken`` task
    (its ``summary`` the error)."""
    from ._discovery import TASK_GROUP
    from ._discovery import scan_entry_points

    tasks: list[RewardTask] = []
    for ep in scan_entry_points((TASK_GROUP,)):
        try:
            obj = ep.load()
            where = os.path.dirname(getattr(sys.modules.get(ep.module), "__file__", "") or "")
            decls = obj() if callable(obj) else obj
            for decl in decls if isinstance(decls, (list, tuple)) else [decls]:
                tasks.append(_task(decl, ep.name, ep, where))
        except Exception as exc:  # noqa: BLE001 - one broken package must not hide the others
            why = f"{type(exc).__name__}: {exc}"
            tasks.append(RewardTask(ep.name, (), "", "broken", ep.dist, ep.version, why))
    return _one_a_name(sorted(tasks, key=lambda t: t.name))


def _one_a_name(tasks: list[RewardTask]) -> list[RewardTask]:
    """``tasks`` with a name two packages register as one ``duplicate`` task that names them."""
    out: list[RewardTask] = []
    for name, same in itertools.groupby(tasks, key=lambda t: t.name):
        group = list(same)
        if len(group) == 1:
            out.append(group[0])
            continue
        who = "; ".join(f"{t.dist or '?'} {t.version or ''}".strip() for t in group)
        out.append(RewardTask(name, (), "", "duplicate", None, None,
                              f"registered by {len(group)} packages ({who}): uninstall all but one"))
    return out


def get_task(name: str) -> RewardTask:
    """The installed task ``name``.

    :raises UsageError: an unknown task (naming close names), or one whose entry point is broken.
    """
    import difflib

    tasks = {t.name: t for t in list_tasks()}
    task = tasks.get(name)
    if task is None:
        close = difflib.get_close_matches(name, list(tasks), n=3, cutoff=0.6)
        hint = f"did you mean: {', '.join(map(repr, close))}?\n" if close else ""
        raise UsageError(f"unknown task {name!r}\n{hint}{len(tasks)} tasks installed for {sys.executable}; "
                         "install the package that provides it there (see `rewardhub tasks`)")
    if task.kind == "broken":
        raise UsageError(f"task {name!r} ({task.dist} {task.version}) cannot be loaded: {task.summary}")
    if task.kind == "duplicate":
        raise UsageError(f"task {name!r} is {task.summary}\nsee `rewardhub tasks`")
    return task


def _source_rows(task: RewardTask, size: int | None, seed: int) -> Iterable[Any]:
    d = task.decl
    if task.kind == "rows":
        n = size if size is not None else task.size
        if n is None:
            raise UsageError(f"task {task.name!r} is a generator with no default size\ngive --size N")
        # the first n rows: a generator that ignores its size (or never ends) gives no more than asked
        generated: Iterable[Any] = itertools.islice(d["rows"](n, seed), n)
        return generated
    if task.kind == "file":
        from .datasets import iter_rows

        path = os.path.join(task.where, str(d["file"]))
        rows: Iterable[Any] = (r.data for r in iter_rows(path, key=f"task {task.name!r}"))
    else:
        import importlib

        try:
            datasets = importlib.import_module("datasets")
        except ImportError as exc:
            raise UsageError(f"task {task.name!r} reads an HF dataset: pip install datasets") from exc
        rows = datasets.load_dataset(str(d["hf"]), **dict(d.get("hf_kwargs") or {"split": "train"}))
    return itertools.islice(rows, size) if size is not None else rows


def task_rows(task: RewardTask | str, size: int | None = None, seed: int = 0) -> list[dict[str, Any]]:
    """The task's rows in verl's format, as a list (see :func:`iter_task_rows`)."""
    return list(iter_task_rows(task, size, seed))


def iter_task_rows(task: RewardTask | str, size: int | None = None,
                   seed: int = 0) -> Iterator[dict[str, Any]]:
    """The task's rows in verl's format, one at a time: generated with ``size`` and ``seed`` (no more than
    ``size``, whatever the generator yields), or read from its file or HF dataset (the first ``size`` rows).

    :raises UsageError: naming the task and the row when a row has no prompt or is not a mapping, or
        when the task's generator raises (naming the exception).
    """
    from .datasets import MISSING
    from .datasets import Row
    from .datasets import answer_of
    from .datasets import prompt_of

    task = get_task(task) if isinstance(task, str) else task
    if size is not None and size < 1:
        raise UsageError(f"--size {size}: give at least 1")
    origin = f"task {task.name!r} ({task.dist or '?'} {task.version or ''})".replace(" )", ")")
    rows = iter(_source_rows(task, size, seed))
    for i in itertools.count():
        try:
            data = next(rows)
        except StopIteration:
            return
        except UsageError:
            raise
        except Exception as exc:  # noqa: BLE001 - the task's own code: its error, named, not a traceback
            raise UsageError(f"{origin}: its rows failed at row {i + 1}: {type(exc).__name__}: {exc}\n"
                             "the task's package is at fault: report it to its authors") from None
        if not isinstance(data, Mapping):
            raise UsageError(f"{origin}: row {i + 1} is a {type(data).__name__} ({str(data)[:60]!r}), not a "
                             "mapping\na row has prompt (or question) and ground_truth (or answer)")
        row = Row(f"task {task.name!r}", i + 1, dict(data))
        prompt = prompt_of(row)
        answer = answer_of(row)
        extra = data.get("extra_info")
        yield {
            "data_source": data.get("data_source") or task.data_source,
            "prompt": [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt,
            "ability": data.get("ability") or task.ability,
            "reward_model": {"style": "rule", "ground_truth": None if answer is MISSING else answer},
            "extra_info": {"index": i, **(dict(extra) if isinstance(extra, Mapping) else {})},
        }


def write_rows(rows: Iterable[dict[str, Any]], path: str, batch: int = 10_000) -> int:
    """``rows`` to ``path`` as they come (parquet, in row groups of ``batch`` rows, when it ends in
    ``.parquet`` / ``.pq``, else JSONL: an object a line); the number of rows written. Nothing is left at
    ``path`` when a row fails."""
    import json

    tmp = f"{path}.{os.getpid()}.tmp"
    count = 0
    try:
        if path.endswith((".parquet", ".pq")):
            from ._extras import require

            pa = require("pyarrow", f"-o {path}: writing parquet", "or write JSONL (-o rows.jsonl)")
            import pyarrow.parquet as pq

            writer = None
            try:
                it = iter(rows)
                while chunk := list(itertools.islice(it, batch)):
                    table = pa.Table.from_pylist(chunk, schema=writer.schema if writer else None)
                    writer = writer or pq.ParquetWriter(tmp, table.schema)
                    writer.write_table(table)
                    count += len(chunk)
                if writer is None:
                    pq.write_table(pa.table({}), tmp)
            except (pa.ArrowException, TypeError, ValueError) as exc:
                raise UsageError(f"-o {path}: parquet cannot hold these rows ({exc})\n"
                                 "write JSONL instead (-o rows.jsonl)") from None
            finally:
                if writer is not None:
                    writer.close()
        else:
            with open(tmp, "w", encoding="utf-8") as f:
                for r in rows:
                    f.write(json.dumps(r, ensure_ascii=False) + "\n")
                    count += 1
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return count
