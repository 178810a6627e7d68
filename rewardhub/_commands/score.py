"""``rewardhub score CONFIG DATA.jsonl``: score a file of samples, one output row per input row."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
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
from ._output import stop_on_sigterm
from ._output import write_summary

NAME = "score"
HELP = "score a JSONL file of samples with the config's rewards; prints a per-reward summary"
#: rows per Runner call: the first chunk is FIRST_CHUNK rows, later ones about CHUNK_S seconds of
#: work, at most CHUNK rows (rows are written chunk by chunk: a stopped run keeps the chunks done)
CHUNK = 4096
FIRST_CHUNK = 256
CHUNK_S = 1.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="YAML config with a reward: section (legacy keys are migrated)")
    parser.add_argument("data", help="JSONL file: prompt, response, ground_truth, data_source, extra_info")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides, e.g. reward.aggregation=normalize_then_sum")
    parser.add_argument("-o", "--output", help="write scored rows here (default: stdout)")
    parser.add_argument("--summary-json", help="also write the metrics as JSON to this file")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar even on a terminal")
    parser.add_argument("--namespace", metavar="KEY",
                        help="write score/rewards/extra/errors under this one key of each row (needed when "
                             "the input rows have fields of those names)")


def read_jsonl(path: str) -> list[dict[str, Any]]:
    rows = []
    try:
        f = sys.stdin if path == "-" else open(path, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read data file {path!r}: {exc.strerror}") from None
    with f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UsageError(f"{path}:{n}: not valid JSON ({exc.msg})\neach line must be one JSON object") from None
            except RecursionError:
                raise UsageError(f"{path}:{n}: JSON nested too deeply to read\n"
                                 "flatten the row (a few levels of nesting are plenty)") from None
            if not isinstance(row, dict):
                raise UsageError(f"{path}:{n}: a JSON {type(row).__name__}, not an object")
            if "response" not in row:
                raise UsageError(f"{path}:{n}: no 'response' field\n"
                                 "rows need prompt, response, ground_truth, data_source, extra_info")
            rows.append(row)
    return rows


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


def _fmt(x: float, scale: float = 1.0, digits: int = 3) -> str:
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
    from ..config import load_config
    from ..execution import Runner
    from ..execution._columns import Column
    from ..execution._columns import column_metrics
    from ..execution._columns import stats
    from ..execution._local import interrupts_told_apart
    from .check import term_problems

    # validate everything first; the output is written last, to a temporary file renamed at the end
    check_outputs(args.output, args.summary_json, [args.config, args.data])
    cfg = load_config(args.config, args.overrides)
    rows = read_input(args.data, read_jsonl)
    start = time.monotonic()
    progress = Progress(len(rows), sys.stderr.isatty() and not args.no_progress)
    with Runner.from_config(cfg.reward) as runner:
        problems = [p for t in runner.terms for p in term_problems(t, runner)]
        if problems:
            raise UsageError("\n".join(problems))
        check_outputs(args.output, args.summary_json,
                      [t.spec.target.rpartition(":")[0] for t in runner.terms if t.spec.is_file_target])
        names = [t.name for t in runner.terms]
        columns: dict[str, Column] = {n: Column(0) for n in names}
        scores: list[Any] = []
        out = ScoredRows(args.output)
        try:
            with out, rewards_print_to_stderr(out), stop_on_sigterm(), interrupts_told_apart():
                k, size = 0, FIRST_CHUNK
                while k < len(rows):
                    chunk = rows[k:k + size]
                    if not args.namespace:
                        check_result_fields(chunk, k, args.data)
                    began = time.monotonic()
                    res = runner.score(chunk, progress=lambda d, t, k=k, m=len(chunk): progress(k + d * m // max(t, 1)))
                    k += len(chunk)
                    size = max(FIRST_CHUNK, min(CHUNK, int(len(chunk) * CHUNK_S / max(time.monotonic() - began, 1e-3))))
                    out.write(output_row(row, res, i, args.namespace) for i, row in enumerate(chunk))
                    for n in names:
                        columns[n].extend(res.columns[n])
                    scores.extend(res.scores)
        except Interrupted as exc:
            print(f"ERROR: interrupted ({exc.signal_name}) after {out.rows} of {len(rows)} rows; "
                  f"{out.where_kept()}", file=sys.stderr)
            return 130 if exc.signal_name == "SIGINT" else 143
        finally:
            progress.finish()
    mean, std, count = stats(scores)
    metrics = {"reward/mean": mean, "reward/std": std, "reward/count": float(count)}
    for n in names:
        metrics.update(column_metrics(n, columns[n]))
    wall = time.monotonic() - start
    err = sys.stdout if args.output else sys.stderr
    print(summary_table(metrics, names), file=err)
    print(f"\n{len(rows)} samples scored in {wall:.2f}s ({len(rows) / max(wall, 1e-9):,.0f}/s)"
          + (f"; rows written to {args.output}" if args.output else ""), file=err)
    if args.summary_json:
        write_summary(args.summary_json, {"metrics": metrics, "samples": len(rows), "wall_s": wall}, args.output)
    return 0

