"""``rewardhub score CONFIG DATA.jsonl``: score a file of samples, one output row per input row."""

from __future__ import annotations

import argparse
import contextlib
import itertools
import math
import os
import sys
import time
from collections.abc import Iterator
from typing import Any

from ..errors import Interrupted
from ..errors import UsageError
from ._common import table
from ._output import ScoredRows
from ._output import check_outputs
from ._output import check_result_fields
from ._output import output_row
from ._output import read_input
from ._output import rewards_print_to_stderr
from ._output import stop_on_signals
from ._output import write_summary

NAME = "score"
HELP = (
    "score a JSONL or parquet file (or save_to_disk folder) of samples with the config's rewards; prints a "
    "per-reward summary"
)
#: rows per Runner call: the first chunk is FIRST_CHUNK rows, later ones about CHUNK_S seconds of
#: work, at most CHUNK rows (rows are written chunk by chunk: a stopped run keeps the chunks done)
CHUNK = 4096
FIRST_CHUNK = 256
CHUNK_S = 1.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="YAML config with a reward: section (legacy keys are migrated)")
    parser.add_argument(
        "data",
        help="JSONL or parquet file (told by content; gzip/bz2/xz too; '-' for stdin, or a "
        "pipe), a glob, or a datasets save_to_disk folder: response, prompt, ground_truth (or "
        "verl's reward_model.ground_truth), data_source, extra_info; or messages (a trajectory, "
        "OpenAI chat format) in place of prompt and response",
    )
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="config overrides, e.g. reward.aggregation=normalize_then_sum",
    )
    parser.add_argument(
        "-o",
        "--output",
        help="write scored rows here, JSONL or .parquet (default: stdout): each "
        "input row unchanged plus the results; never inside what DATA reads",
    )
    parser.add_argument("--prompt-key", help="the prompt column (default: prompt, else question)")
    parser.add_argument("--answer-key", help="the ground-truth column, dotted for nested (default: "
                        "reward_model.ground_truth, ground_truth, answer)")
    parser.add_argument("--summary-json", help="also write the metrics as JSON to this file")
    parser.add_argument("--max-error-rate", type=float, metavar="RATE",
                        help="exit 1 when a reward's failed calls (errors and timeouts) are above this share "
                             "of the rows it applied to, 0 to 1 (default: only when every call of a "
                             "reward failed)")
    parser.add_argument("--debug", action="store_true",
                        help="show where in a reward's code its calls failed (also: REWARDHUB_DEBUG=1)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar even on a terminal")
    parser.add_argument("--namespace", metavar="KEY",
                        help="write score/rewards/extra/errors under this one key of each row (needed when "
                             "the input rows have fields of those names)")


def read_samples(
    path: str, *, prompt_key: str | None = None, answer_key: str | None = None
) -> Iterator[dict[str, Any]]:
    """The samples of a JSONL or parquet file or a ``save_to_disk`` folder, streamed, in either row
    format (verl's ``reward_model.ground_truth`` becomes ``ground_truth``)."""
    for _, sample in read_pairs(path, prompt_key=prompt_key, answer_key=answer_key):
        yield sample


def read_pairs(path: str, *, prompt_key: str | None = None,
               answer_key: str | None = None) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """``(input row, sample)`` for every row of ``path``: the row as read (what the output keeps, unchanged)
    and the sample the rewards get.

    :raises UsageError: a row without ``response`` or ``messages``, or a ``prompt_key`` / ``answer_key``
        that names no column of the first row (naming the columns it has).
    """
    from ..datasets import has_column
    from ..datasets import iter_rows
    from ..datasets import to_sample

    first = True
    for row in iter_rows(path, key="data"):
        if "response" not in row.data and "messages" not in row.data:
            raise UsageError(
                f"{row.where}: no 'response' column (nor 'messages')\n"
                "rows need response, and prompt, ground_truth (or verl's reward_model.ground_truth), "
                "data_source, extra_info; or a trajectory: messages (OpenAI chat format) in place of "
                "prompt and response"
            )
        if first:
            first = False
            for flag, key in (("--prompt-key", prompt_key), ("--answer-key", answer_key)):
                if key and not has_column(row.data, key):
                    raise UsageError(f"{flag} {key!r}: {row.where} has no such column\n"
                                     f"its columns are: {_columns(row.data)}")
        yield row.data, to_sample(row, prompt_key=prompt_key, answer_key=answer_key)


def _columns(data: dict[str, Any], shown: int = 40) -> str:
    """The row's columns, nested ones dotted (``reward_model.ground_truth``); the first ``shown`` of them."""
    names: list[str] = []

    def walk(node: dict[str, Any], prefix: str) -> None:
        for k, v in node.items():
            names.append(f"{prefix}{k}")
            if isinstance(v, dict) and len(names) <= shown:
                walk(v, f"{prefix}{k}.")

    walk(data, "")
    more = f", ... ({len(names)} in all)" if len(names) > shown else ""
    return (", ".join(names[:shown]) or "(none)") + more


def chunks(samples: Iterator[dict[str, Any]], size: int = CHUNK) -> Iterator[list[dict[str, Any]]]:
    chunk: list[dict[str, Any]] = []
    for s in samples:
        chunk.append(s)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def score_chunk(runner: Any, chunk: list[dict[str, Any]], needing: list[str], namespace: str | None = None,
                progress: Any = None, inputs: list[dict[str, Any]] | None = None,
                indices: list[int] | None = None, defer_raise: bool = False,
                ) -> tuple[list[dict[str, Any]], dict[str, Any], list[Any]]:
    """Score one chunk: ``(output rows in input order, term -> Column, scores)``; an output row is the
    input row (``inputs[i]``, else the sample) with the results added.

    A row with no ground truth is not given to the rewards when some term needs one (``needing``):
    its row gets ``score: null`` and an error for each of those terms, counted as errors; the
    columns hold the scored rows first, then those (``rewardhub serve`` maps them back).

    :param indices: each sample's number in error messages (its position in its own request).
    :param defer_raise: see :meth:`rewardhub.execution.Runner.score`.
    """
    from ..execution import ERROR
    from ..execution import Column

    names = [t.name for t in runner.terms]
    rows_in = chunk if inputs is None else inputs
    missing = [i for i, s in enumerate(chunk) if needing and s.get("ground_truth") is None]
    if not missing:
        res = runner.score(chunk, progress=progress, indices=indices, defer_raise=defer_raise)
        return (
            [output_row(r, res, i, namespace) for i, r in enumerate(rows_in)],
            dict(res.columns),
            list(res.scores),
        )
    gone = set(missing)
    ok = [s for i, s in enumerate(chunk) if i not in gone]
    ok_indices = None if indices is None else [k for i, k in enumerate(indices) if i not in gone]
    res = runner.score(ok, progress=progress, indices=ok_indices, defer_raise=defer_raise) if ok else None
    kept = [r for i, r in enumerate(rows_in) if i not in gone]
    scored = iter([output_row(r, res, i, namespace) for i, r in enumerate(kept)] if res is not None else [])
    msg = (
        "no ground truth in this row (ground_truth, or verl's reward_model.ground_truth), which this reward "
        "needs"
    )
    rows = []
    for i, s in enumerate(rows_in):
        if i in gone:
            result = {
                "score": None,
                "rewards": {n: None for n in names},
                "extra": {},
                "errors": {n: msg for n in needing},
            }
            rows.append({**s, namespace: result} if namespace else {**s, **result})
        else:
            rows.append(next(scored))
    columns: dict[str, Any] = {}
    for n in names:
        col = Column(0)
        if res is not None:
            col.extend(res.columns[n])
        extra = Column(len(missing))
        for j in range(len(missing)):
            if n in needing:
                extra.fail(j, ERROR, msg, 0.0)
        extra.not_applicable(j for j in range(len(missing)) if n not in needing)
        col.extend(extra)
        col.labels = [i for i in range(len(chunk)) if i not in gone] + missing  # rows of the chunk
        columns[n] = col
    scores = (list(res.scores) if res is not None else []) + [None] * len(missing)
    return rows, columns, scores


class Progress:
    """A one-line progress bar on stderr, only when it is a terminal."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.enabled, self.start, self.last = max(total, 1), enabled, time.monotonic(), 0.0

    def __call__(self, done: int, total: int | None = None) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self.last < 0.1 and done < self.total:
            return
        self.last = now
        frac = min(done / self.total, 1.0)
        rate = done / max(now - self.start, 1e-9)
        bar = "#" * int(frac * 30)
        sys.stderr.write(f"\rscoring [{bar:<30}] {done}/{self.total} {rate:,.0f}/s")
        sys.stderr.flush()

    def finish(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")


def _fmt(x: float | None, scale: float = 1.0, digits: int = 3) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x * scale:.{digits}f}"


def summary_table(metrics: dict[str, float], terms: list[str]) -> str:
    rows = []
    for t in terms:
        m = {k.rsplit("/", 1)[1]: v for k, v in metrics.items() if k.startswith(f"rewards/{t}/")}
        rows.append([t, _fmt(m.get("mean")), _fmt(m.get("std")), str(int(m.get("count", 0))),
                     str(int(m.get("errors", 0))), str(int(m.get("timeouts", 0))),
                     _fmt(m.get("latency_p50"), 1000, 2), _fmt(m.get("latency_p99"), 1000, 2)])
    rows.append(["(aggregate)", _fmt(metrics.get("reward/mean")), _fmt(metrics.get("reward/std")),
                 str(int(metrics.get("reward/count", 0))), "", "", "", ""])
    return table(rows, ["reward", "mean", "std", "count", "errors", "timeouts", "p50 ms", "p99 ms"])


def run(args: argparse.Namespace) -> int:
    from .._datafiles import is_regular
    from ..config import load_plan
    from ..datasets import count_rows
    from ..datasets import input_files
    from ..datasets import terms_needing
    from ..distributed import runner_from_config
    from ..execution import Column
    from ..execution import RoutingWatch
    from ..execution import SlowestSamples
    from ..execution import column_metrics
    from ..execution import debug_enabled
    from ..execution import interrupts_told_apart
    from ..execution import stats
    from ._failures import debug_lines
    from ._failures import failure_report
    from ._failures import over_the_limit
    from .check import term_problems

    if args.max_error_rate is not None and not 0.0 <= args.max_error_rate <= 1.0:
        raise UsageError(f"--max-error-rate {args.max_error_rate:g}: give a share from 0 to 1 (0.05: 5%)")
    if args.debug:
        os.environ["REWARDHUB_DEBUG"] = "1"  # the error printed at the end (on_failure: raise) reads it
    # validate everything first; the output is written last, to a temporary file renamed at the end
    check_outputs(args.output, args.summary_json, [args.config, *input_files(args.data)])
    plan = load_plan(args.config, args.overrides)
    pairs = read_pairs(args.data, prompt_key=args.prompt_key, answer_key=args.answer_key)
    # a bad file fails before any output
    first = read_input(args.data, lambda _: list(itertools.islice(pairs, 1)))
    show = sys.stderr.isatty() and not args.no_progress
    total = count_rows(args.data) if show else 0
    start = time.monotonic()
    progress = Progress(total, show)
    n_rows = 0
    with contextlib.ExitStack() as stack:
        with contextlib.redirect_stdout(sys.stderr):  # a reward module that prints when imported
            runner = stack.enter_context(runner_from_config(plan.reward))
        problems = [p for t in runner.terms for p in term_problems(t, runner)]
        if problems:
            raise UsageError("\n".join(problems))
        check_outputs(args.output, args.summary_json,
                      [t.spec.target.rpartition(":")[0] for t in runner.terms if t.spec.is_file_target])
        names = [t.name for t in runner.terms]
        needing = terms_needing(runner)
        columns: dict[str, Column] = {n: Column(0) for n in names}
        slowest = SlowestSamples()
        scores: list[Any] = []
        out = ScoredRows(args.output)
        out.namespace = args.namespace
        try:
            with stop_on_signals(), out, rewards_print_to_stderr(out), interrupts_told_apart():
                rest, size = _chain(first, pairs), FIRST_CHUNK
                while chunk := list(itertools.islice(rest, size)):
                    inputs = [row for row, _ in chunk]
                    check_result_fields(inputs, n_rows, args.data, args.namespace)
                    began, done = time.monotonic(), n_rows
                    rows, cols, chunk_scores = score_chunk(
                        runner, [sample for _, sample in chunk], needing, args.namespace,
                        progress=lambda d, t, k=done, m=len(chunk): progress(k + d * m // max(t, 1)),
                        inputs=inputs)
                    size = max(
                        FIRST_CHUNK,
                        min(CHUNK, int(len(chunk) * CHUNK_S / max(time.monotonic() - began, 1e-3))),
                    )
                    out.write(rows)
                    for n in names:
                        columns[n].extend(cols[n])
                    slowest.add(cols, [sample for _, sample in chunk], n_rows)
                    scores.extend(chunk_scores)
                    n_rows += len(chunk)
                    progress(n_rows)
        except Interrupted as exc:
            of = f" of {count_rows(args.data)}" if all(map(is_regular, input_files(args.data))) else ""
            _say(f"ERROR: interrupted ({exc.signal_name}) after {out.rows}{of} rows; {out.where_kept()}")
            return 128 + exc.signum
        finally:
            progress.finish()
        used = provenance(runner)
    RoutingWatch({t.name: t.routes for t in runner.terms}, _say_warning, so_far=False).see(columns)
    mean, std, count = stats(scores)
    metrics = {"reward/mean": mean, "reward/std": std, "reward/count": float(count)}
    for n in names:
        metrics.update(column_metrics(n, columns[n]))
    wall = time.monotonic() - start
    err = sys.stdout if args.output else sys.stderr
    print(summary_table(metrics, names), file=err)
    print(f"\n{n_rows} samples scored in {wall:.2f}s ({n_rows / max(wall, 1e-9):,.0f}/s)"
          + (f"; rows written to {args.output}" if args.output else ""), file=err)
    failures = failure_report(columns)
    if args.summary_json:
        write_summary(args.summary_json, {"metrics": metrics, "samples": n_rows, "wall_s": wall,
                                          "rewards": used, "failures": failures,
                                          "slowest": slowest.as_json()}, args.output)
    if debug_enabled():
        for line in debug_lines(failures):
            _say(line)
    too_many = over_the_limit(failures, args.max_error_rate)
    for line in too_many:
        _say(line)
    return 1 if too_many else 0


def provenance(runner: Any) -> list[dict[str, Any]]:
    """Every reward term the run used: where it came from (source, distribution and version, target,
    sha256 of a file reward), the executor it ran on, and the processes that ran it."""
    import os

    from ..distributed import reward_facts

    ray_workers = runner.ray_workers()
    pool = [{"pid": pid} for pid in runner.worker_pids()]
    out = []
    for term, facts in zip(runner.terms, runner.describe()):
        spec = term.spec
        on_ray = facts["executor"] == "ray"
        # a Ray worker rebuilt the registry: its own values of the reward (equal to the driver's, or
        # it would not have started)
        out.append({"name": term.name, "reward": spec.name, **reward_facts(spec),
                    "executor": facts["executor"],
                    "workers": [{**{k: w.get(k) for k in ("pool", "node", "pid", "registry_fingerprint")},
                                 **(w.get("rewards") or {}).get(spec.name, {})}
                                for w in ray_workers if w.get("pool") == (term.pool or "reward")]
                    if on_ray else pool if facts["executor"] == "process" else [{"pid": os.getpid()}]})
    return out


def _say(line: str) -> None:
    """``line`` on stderr, if there still is one (a closed terminal's, after SIGHUP, is gone)."""
    try:
        print(line, file=sys.stderr, flush=True)
    except OSError:
        pass


def _say_warning(line: str) -> None:
    _say(f"WARNING: {line}")


def _chain(first: list[Any], rest: Iterator[Any]) -> Iterator[Any]:
    yield from first
    yield from rest
