"""``rewardhub tasks``: the installed tasks (a dataset and its reward): dist, version, reward and size."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ._common import dump_json
from ._common import table

if TYPE_CHECKING:
    from ..tasks import RewardTask

NAME = "tasks"
HELP = "list installed tasks (entry-point group rewardhub.tasks): a dataset and the reward that scores it"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="machine-readable output, sorted by name")


def _size(task: RewardTask) -> str:
    if task.kind == "rows":
        return f"generated ({task.size} by default)" if task.size else "generated (--size N)"
    return task.kind + (f" ({task.size} rows)" if task.size else "")


def terms(task: RewardTask) -> str:
    """The task's reward terms, by name."""
    return ", ".join(str(r.get("name") or r.get("path") or r.get("module")) for r in task.rewards)


def run(args: argparse.Namespace) -> int:
    from ..tasks import list_tasks

    tasks = list_tasks()
    rows = [{"name": t.name, "dist": t.dist, "version": t.version, "kind": t.kind, "size": t.size,
             "data_source": t.data_source, "reward": [dict(r) for r in t.rewards], "summary": t.summary}
            for t in tasks]
    if args.json:
        dump_json(rows)
        return 0
    broken = {t.name: t.kind for t in tasks if t.kind in ("broken", "duplicate")}
    body = [[t.name, f"{t.dist} {t.version}" if t.dist else "-", terms(t) or "-",
             broken.get(t.name) or _size(t), ("ERROR: " if t.name in broken else "") + t.summary]
            for t in tasks]
    print(table(body, ["task", "from", "reward", "size", "summary"]))
    dups = sum(kind == "duplicate" for kind in broken.values())
    twice = f", {dups} registered twice" if dups else ""
    print(f"\n{len(tasks)} tasks, {len(broken) - dups} broken{twice}; `rewardhub data TASK -o rows.jsonl` "
          "writes its rows")
    return 0
