"""``rewardhub score CONFIG DATA.jsonl``: score a file of samples, one output row per input row."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Iterator
from typing import Any

from ..errors import UsageError
from ._common import table

NAME = "score"
HELP = "score a JSONL or parquet file (or save_to_disk folder) of samples with the config's rewards; prints a per-reward summary"
CHUNK = 4096


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="YAML config with a reward: section (legacy keys are migrated)")
    parser.add_argument("data", help="JSONL or parquet file, or a datasets save_to_disk folder: response, prompt, "
                        "ground_truth (or verl's reward_model.ground_truth), data_source, extra_info")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides, e.g. reward.aggregation=normalize_then_sum")
    parser.add_argument("-o", "--output", help="write scored rows here, JSONL or .parquet (default: stdout)")
    parser.add_argument("--prompt-key", help="the prompt column (default: prompt, else question)")
    parser.add_argument("--answer-key", help="the ground-truth column, dotted for nested (default: "
                        "reward_model.ground_truth, ground_truth, answer)")
    parser.add_argument("--summary-json", help="also write the metrics as JSON to this file")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar even on a terminal")


def read_samples(path: str, *, prompt_key: str | None = None, answer_key: str | None = None) -> Iterator[dict[str, Any]]:
    """The samples of a JSONL or parquet file or a ``save_to_disk`` folder, streamed, in either row
    format (verl's ``reward_model.ground_truth`` becomes ``ground_truth``)."""
    from ..datasets import iter_rows
    from ..datasets import to_sample

    for row in iter_rows(path, key="data"):
        if "response" not in row.data:
            raise UsageError(f"{row.where}: no 'response' column\n"
                             "rows need response, and prompt, ground_truth (or verl's reward_model.ground_truth), "
                             "data_source, extra_info")
        yield to_sample(row, prompt_key=prompt_key, answer_key=answer_key)


def read_jsonl(path: str) -> list[dict[str, Any]]:
    """Every sample of ``path`` in a list (see :func:`read_samples`, which streams)."""
    return list(read_samples(path))


def chunks(samples: Iterator[dict[str, Any]], size: int = CHUNK) -> Iterator[list[dict[str, Any]]]:
    chunk: list[dict[str, Any]] = []
    for s in samples:
        chunk.append(s)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def score_chunk(runner: Any, chunk: list[dict[str, Any]], needing: list[str]) -> tuple[list[dict[str, Any]], dict[str, Any], list[Any]]:
    """Score one chunk: ``(output rows in input order, term -> Column, scores)``.

    A row with no ground truth is not given to the rewards when some term needs one (``needing``):
    its row gets ``score: null`` and an error for each of those terms, counted as errors.
    """
    from ..execution._columns import Column
    from ..execution._outcome import ERROR

    names = [t.name for t in runner.terms]
    missing = [i for i, s in enumerate(chunk) if needing and s.get("ground_truth") is None]
    if not missing:
        res = runner.score(chunk)
        return res.rows(chunk), dict(res.columns), list(res.scores)
    gone = set(missing)
    ok = [s for i, s in enumerate(chunk) if i not in gone]
    res = runner.score(ok) if ok else None
    scored = iter(res.rows(ok) if res is not None else [])
    msg = "no ground truth in this row (ground_truth, or verl's reward_model.ground_truth), which this reward needs"
    rows = []
    for i, s in enumerate(chunk):
        if i in gone:
            rows.append({**s, "score": None, "rewards": {n: None for n in names}, "extra": {},
                         "errors": {n: msg for n in needing}})
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
        columns[n] = col
    scores = (list(res.scores) if res is not None else []) + [None] * len(missing)
    return rows, columns, scores


class RowWriter:
    """Scored rows to JSONL (one object a line) or, for a ``.parquet`` path, to parquet (written per
    chunk; ``extra`` and ``errors`` as JSON text, so that every chunk has the same columns)."""

    def __init__(self, out: Any, path: str | None) -> None:
        self.out, self.path = out, path
        self.parquet = bool(path) and str(path).lower().endswith((".parquet", ".pq"))
        self._writer: Any = None
        self._schema: Any = None

    def write(self, rows: list[dict[str, Any]]) -> None:
        if not self.parquet:
            self.out.write("".join(json.dumps(row, sort_keys=True, default=str, allow_nan=True) + "\n"
                                   for row in rows))
            return
        import pyarrow as pa
        import pyarrow.parquet as pq

        flat = [{**r, "extra": json.dumps(r.get("extra") or {}, sort_keys=True, default=str),
                 "errors": json.dumps(r["errors"], sort_keys=True) if r.get("errors") else None} for r in rows]
        try:
            if self._schema is None:  # the result columns get fixed types (a first chunk may be all null)
                table = pa.Table.from_pylist(flat)
                names = sorted({k for r in rows for k in r.get("rewards") or {}})
                fixed = {"score": pa.float64(), "extra": pa.string(), "errors": pa.string(),
                         "rewards": pa.struct([(n, pa.float64()) for n in names])}
                schema = table.schema
                for name, kind in fixed.items():
                    schema = schema.set(schema.get_field_index(name), pa.field(name, kind))
                self._schema = schema
            table = pa.Table.from_pylist(flat, schema=self._schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError) as exc:
            raise UsageError(f"-o {self.path}: these rows do not fit the parquet columns of the first ones ({exc})\n"
                             "write JSONL instead (-o FILE.jsonl), or give every row the same column types") from None
        if self._writer is None:
            self._writer = pq.ParquetWriter(self.out, table.schema)
        self._writer.write_table(table)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


def open_output(path: str | None) -> Any:
    """The file scored rows go to (``None``: stdout); parquet by the ``.parquet`` extension."""
    if not path:
        return sys.stdout
    if path.lower().endswith((".parquet", ".pq")):
        return open(path, "wb")
    return open(path, "w", encoding="utf-8")


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

    from ..datasets import count_rows
    from ..datasets import terms_needing

    cfg = load_config(args.config, args.overrides)
    samples = read_samples(args.data, prompt_key=args.prompt_key, answer_key=args.answer_key)
    first = next(chunks(samples, 1), [])  # the data's errors (a missing file, an empty one) before any output
    show = sys.stderr.isatty() and not args.no_progress
    total = count_rows(args.data) if show else 0
    start = time.monotonic()
    out = open_output(args.output)
    writer = RowWriter(out, args.output)
    progress = Progress(total, show)
    n_rows = 0
    with Runner.from_config(cfg.reward) as runner:
        names = [t.name for t in runner.terms]
        needing = terms_needing(runner)
        columns: dict[str, Column] = {n: Column(0) for n in names}
        scores: list[Any] = []
        try:
            for chunk in chunks(_chain(first, samples)):
                rows, cols, chunk_scores = score_chunk(runner, chunk, needing)
                writer.write(rows)
                for n in names:
                    columns[n].extend(cols[n])
                scores.extend(chunk_scores)
                n_rows += len(chunk)
                progress(n_rows)
        finally:
            progress.finish()
            writer.close()
            if out is not sys.stdout:
                out.close()
    mean, std, count = stats(scores)
    metrics = {"reward/mean": mean, "reward/std": std, "reward/count": float(count)}
    for n in names:
        metrics.update(column_metrics(n, columns[n]))
    wall = time.monotonic() - start
    err = sys.stdout if args.output else sys.stderr
    print(summary_table(metrics, names), file=err)
    print(f"\n{n_rows} samples scored in {wall:.2f}s ({n_rows / max(wall, 1e-9):,.0f}/s)"
          + (f"; rows written to {args.output}" if args.output else ""), file=err)
    if args.summary_json:
        with open(args.summary_json, "w", encoding="utf-8") as f:
            json.dump({"metrics": metrics, "samples": n_rows, "wall_s": wall}, f, indent=2, sort_keys=True)
    return 0


def _chain(first: list[dict[str, Any]], rest: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    yield from first
    yield from rest
