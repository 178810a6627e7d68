"""``rewardhub data TASK -o rows.jsonl|.parquet``: a task's rows, in verl's row format."""

from __future__ import annotations

import argparse

NAME = "data"
HELP = "write a task's rows (verl's format: data_source, prompt, reward_model.ground_truth, extra_info)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("task", help="a task name (see `rewardhub tasks`)")
    parser.add_argument("-o", "--output", required=True, help="rows.jsonl, or rows.parquet (needs pyarrow)")
    parser.add_argument("--size", type=int, help="rows to generate (a file or HF dataset: its first N rows)")
    parser.add_argument("--seed", type=int, default=0, help="a generator's seed (default 0)")


def run(args: argparse.Namespace) -> int:
    import os
    import sys

    from ..tasks import get_task
    from ..tasks import iter_task_rows
    from ..tasks import write_rows
    from ._output import check_outputs
    from .tasks import terms

    task = get_task(args.task)
    shipped = [os.path.join(task.where, task.decl["file"])] if task.kind == "file" else []
    check_outputs(args.output, None, shipped)  # never over the task's own file
    count = write_rows(iter_task_rows(task, args.size, args.seed), args.output)  # streamed, row by row
    print(f"{count} rows of task {task.name!r} (data_source {task.data_source!r}, reward {terms(task)}) "
          f"written to {args.output}", file=sys.stderr)
    return 0
