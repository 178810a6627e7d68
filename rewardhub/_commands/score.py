"""``rewardhub score CONFIG DATA.jsonl``: score a file of samples, one output row per input row."""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import itertools
import math
import os
import sys
import time
from typing import Any

from ..errors import Interrupted
from ..errors import RewardhubError
from ..errors import UsageError
from ..scoring import GroupChunks
from ..scoring import check_result_fields
from ..scoring import has_group_terms
from ..scoring import missing_ground_truth
from ..scoring import output_row
from ..scoring import read_pairs
from ..types import InputRow
from ._chunk import say
from ._chunk import score_chunk
from ._common import table
from ._failures import WARN_ERROR_RATE
from ._output import ScoredRows
from ._output import check_outputs
from ._output import prints_to_stderr
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
    parser.add_argument("--cache", metavar="DIR", help="keep the scores of the terms with cache on in this "
                        "folder (DIR/scores.sqlite): a re-run calls them only for inputs not scored yet")
    parser.add_argument("--max-error-rate", type=float, metavar="RATE",
                        help="exit 1 when a reward's failed calls (errors and timeouts) are above this share "
                             "of the rows it applied to, 0 to 1 (default: only when every call of a "
                             "reward failed)")
    parser.add_argument("--warn-error-rate", type=float, metavar="RATE", default=WARN_ERROR_RATE,
                        help="print a WARNING: line naming a reward whose failed calls are above this share "
                             f"of the rows it applied to, 0 to 1 (default {WARN_ERROR_RATE:g})")
    parser.add_argument("--still-waiting-s", type=float, metavar="SECONDS", default=60.0,
                        help="name a reward call that has run this long (reward, row, seconds), and again "
                             "each time its time doubles: a reward with no timeout_s can hang (default 60; "
                             "0: never; calls on the process and ray executors are not seen)")
    parser.add_argument("--debug", action="store_true",
                        help="show where in a reward's code its calls failed (also: REWARDHUB_DEBUG=1)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar even on a terminal")
    parser.add_argument("--address", metavar="ADDR",
                        help="score on the Ray cluster at ADDR (default: RAY_ADDRESS when set): the files "
                             "are streamed through Ray Data to reward actors on its nodes, the rows written "
                             "here in input order; 'local': in this process, whatever RAY_ADDRESS says")
    parser.add_argument("--namespace", metavar="KEY",
                        help="write score/rewards/extra/errors under this one key of each row (needed when "
                             "the input rows have fields of those names)")


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
    from ..datasets import count_rows
    from ..datasets import input_files
    from ..datasets import terms_needing
    from ..execution import Column
    from ..execution import SlowestSamples
    from ..execution import StallWatch
    from ..execution import interrupts_told_apart
    from ..scorers import open_scorer
    from ._common import load_plan_told

    if args.max_error_rate is not None and not 0.0 <= args.max_error_rate <= 1.0:
        raise UsageError(f"--max-error-rate {args.max_error_rate:g}: give a share from 0 to 1 (0.05: 5%)")
    if not 0.0 <= args.still_waiting_s < math.inf:
        raise UsageError(f"--still-waiting-s {args.still_waiting_s:g}: give seconds, 0 or more (0: never)")
    if not 0.0 <= args.warn_error_rate <= 1.0:
        raise UsageError(f"--warn-error-rate {args.warn_error_rate:g}: give a share from 0 to 1 (0.1: 10%)")
    if args.debug:
        os.environ["REWARDHUB_DEBUG"] = "1"  # the error printed at the end (on_failure: raise) reads it
    address = cluster_address(args.address)
    if address:
        from ._score_cluster import run_on_cluster

        return run_on_cluster(args, address, finish=finish, progress=Progress)
    # validate everything first; the output is written last, to a temporary file renamed at the end
    check_outputs(args.output, args.summary_json, [args.config, *input_files(args.data)])
    plan = load_plan_told(args.config, args.overrides)
    pairs = read_pairs(args.data, prompt_key=args.prompt_key, answer_key=args.answer_key)
    # a bad file fails before any output
    first = list(itertools.islice(pairs, 1))
    show = sys.stderr.isatty() and not args.no_progress
    total = count_rows(args.data) if show else 0
    start = time.monotonic()
    progress = Progress(total, show)
    n_rows = 0
    with contextlib.ExitStack() as stack:
        # a reward module that prints when imported; what loading makes (math-verify's sympy) lives
        # until the end: the garbage collector is paused meanwhile and leaves it alone afterwards
        # (frozen until the run ends), instead of walking it again and again for nothing (~35 ms)
        stack.callback(gc.unfreeze)
        collecting = gc.isenabled()
        gc.disable()
        try:
            with contextlib.redirect_stdout(sys.stderr):
                scorer = open_scorer(plan.reward, cache_dir=args.cache)
        finally:
            gc.freeze()
            if collecting:
                gc.enable()
        stack.callback(scorer.close)
        facts = scorer.facts
        if args.cache and not any(f.cache for f in facts):
            _say_warning(f"--cache {args.cache}: no reward term has cache on (set cache: true on a term)")
        check_outputs(args.output, args.summary_json, [f.file for f in facts if f.file])
        names = [f.name for f in facts]
        needing = terms_needing(scorer)
        # a group reward sees whole groups: a chunk never ends inside one
        whole_groups = has_group_terms(scorer)
        columns: dict[str, Column] = {n: Column(0) for n in names}
        slowest = SlowestSamples()
        scores: list[Any] = []
        out = ScoredRows(args.output)
        out.namespace = args.namespace
        if args.still_waiting_s and any(f.executor in ("inline", "thread") for f in facts):  # calls here
            stack.enter_context(StallWatch(args.still_waiting_s, _say_warning, lambda: n_rows))
        try:
            with stop_on_signals(), out, prints_to_stderr(out), interrupts_told_apart():
                rest, size = GroupChunks(itertools.chain(first, pairs), whole_groups, args.data), FIRST_CHUNK
                while chunk := rest.take(size):
                    inputs, samples = [row for row, _ in chunk], [sample for _, sample in chunk]
                    check_result_fields(inputs, n_rows, args.data, args.namespace)
                    began, done = time.monotonic(), n_rows
                    # errors name a row by its place in the input (row 4000), never in its chunk
                    rows_here = [InputRow(n_rows + k) for k in range(len(chunk))]
                    # rows scored before a stop (a signal, a server's failure) are kept as scored
                    scored = score_chunk(
                        scorer, samples, missing_ground_truth(samples, needing),
                        progress=lambda d, t, k=done, m=len(chunk): progress(k + d * m // max(t, 1)),
                        indices=rows_here, keep=functools.partial(_keep, out, inputs, args.namespace))
                    size = max(
                        FIRST_CHUNK,
                        min(CHUNK, int(len(chunk) * CHUNK_S / max(time.monotonic() - began, 1e-3))),
                    )
                    out.write([output_row(r, x, args.namespace) for r, x in zip(inputs, scored.results)])
                    for n in names:
                        columns[n].extend(scored.columns[n])
                    slowest.add(scored.columns, samples, n_rows)
                    scores.extend(scored.scores)
                    n_rows += len(chunk)
                    progress(n_rows)
        except Interrupted as exc:
            of = f" of {count_rows(args.data)}" if all(map(is_regular, input_files(args.data))) else ""
            say(f"ERROR: interrupted ({exc.signal_name}) after {out.rows}{of} rows; {out.where_kept()}")
            return 128 + exc.signum
        except RewardhubError:
            if out.kept:
                say(f"note: {out.where_kept()}")
            raise
        finally:
            progress.finish()
        used = scorer.provenance()
        pools = scorer.pool_figures()
    return finish(args, plan, facts, columns, scores, slowest, n_rows=n_rows, start=start, used=used,
                  pools=pools)


def finish(args: argparse.Namespace, plan: Any, facts: Any, columns: dict[str, Any], scores: list[Any],
           slowest: Any, *, n_rows: int, start: float, used: list[dict[str, Any]],
           pools: list[dict[str, Any]]) -> int:
    """The end of a run (local or ``--address``): the summary table, ``--summary-json``, the notes and
    warnings about failures; the exit code."""
    from ..execution import RoutingWatch
    from ..execution import column_metrics
    from ..execution import debug_enabled
    from ..execution import stats
    from ._failures import debug_lines
    from ._failures import drop_notes
    from ._failures import failure_report
    from ._failures import over_the_limit
    from ._failures import warnings_over

    names = [f.name for f in facts]
    RoutingWatch({f.name: f.routes for f in facts}, _say_warning, so_far=False).see(columns)
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
                                          "rewards": used, "failures": failures, "slowest": slowest.as_json(),
                                          **_calibration_figures(plan.reward, names),
                                          **({"pools": pools} if pools else {})}, args.output)
    if debug_enabled():
        for line in debug_lines(failures):
            say(line)
    policies = {f.name: f.on_failure for f in facts}
    for line in drop_notes(columns, policies):
        say(line)
    too_many = over_the_limit(failures, args.max_error_rate)
    for line in warnings_over(failures, args.warn_error_rate, args.max_error_rate) + too_many:
        say(line)
    return 1 if too_many else 0


def cluster_address(flag: str | None) -> str | None:
    """The Ray cluster ``score`` runs on: ``--address``, else ``RAY_ADDRESS``; ``None`` (this process)
    without either, or with ``--address local``."""
    address = flag if flag is not None else os.environ.get("RAY_ADDRESS", "")
    address = address.strip()
    return None if address in ("", "local") else address


def _keep(out: ScoredRows, inputs: list[dict[str, Any]], namespace: str | None,
          kept: list[tuple[int, dict[str, Any]]]) -> None:
    """Write the rows of a chunk scored before the run stopped (each its place in the chunk, its result)."""
    out.write([output_row(inputs[i], r, namespace) for i, r in kept])


def _calibration_figures(reward: Any, names: list[str]) -> dict[str, Any]:
    """The calibration figures of the judge terms that have a ``calibration`` gate (summary.json)."""
    if not any(getattr(t, "calibration", None) for t in reward.rewards):
        return {}
    from ..builtin.judging.calibrate import FIGURES

    return {"calibration": [f for f in FIGURES.values() if f["term"] in set(names)]}


def _say_warning(line: str) -> None:
    say(f"WARNING: {line}")
