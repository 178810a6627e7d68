"""``rewardhub score --address``: the input streamed through Ray Data, scored by actors on the cluster.

The files are read by Ray Data's readers (``read_text`` for JSON lines, ``read_parquet``) in blocks, on any
node; a pool of :class:`ScoreBlocks` actors (Ray Data's autoscaling actor pool) turns each batch into rows
exactly as local ``score`` reads them, and scores them with a :class:`RewardWorker` (which proves its
registry against the driver's, as the reward workers do). Each batch comes back as one pickled record of
the rows and the terms' raw outcomes; ``on_failure`` is applied in the driver, which knows each row's
place in the whole input. With ``preserve_order`` the batches come back in input order, whatever node
scored them; a task or actor lost with its node is run again by Ray Data, and its batch comes back once.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from ..errors import RewardhubError
from ..errors import UsageError
from ._setup import WorkerSetup

__all__ = ["AnsweredScorer", "ScoreBlocks", "cluster_files", "scored_batches"]

#: suffixes of the files a plain folder contributes (sorted by name, as a glob would list them)
_SUFFIXES = (".jsonl", ".json", ".parquet", ".pq")
#: rows per actor call; each comes back as one record
BATCH_ROWS = 1024
#: bytes of a block Ray Data aims for: small enough that one big file is read into many blocks, which the
#: actors score side by side
BLOCK_BYTES = 4 << 20


def cluster_files(data: str) -> tuple[list[str], str]:
    """The files ``score --address`` reads for ``data`` (a file, a glob, or a folder of JSONL or parquet
    files), in order, and their kind (``jsonl`` or ``parquet``).

    :raises UsageError: a missing path, an empty folder or file, a kind Ray Data does not read here
        (compressed, arrow, stdin), or files of both kinds.
    """
    from .._datafiles import kind_of
    from ..datasets import expand_paths

    if data == "-":
        raise UsageError("score --address: DATA '-' (stdin) cannot be read on a cluster\n"
                         "write the rows to a file (on storage every node reads), or score without --address")
    files: list[str] = []
    for path in expand_paths(data):
        if not os.path.isdir(path):
            files.append(path)
            continue
        inside = sorted(os.path.join(path, f) for f in os.listdir(path) if f.lower().endswith(_SUFFIXES))
        if not inside:
            raise UsageError(f"{path}: a folder with no .jsonl or .parquet files\n"
                             "score --address reads JSONL or parquet files, or folders of them "
                             "(a datasets save_to_disk folder: score it without --address)")
        files.extend(inside)
    kinds = {}
    for f in files:
        if os.path.getsize(f) == 0:
            raise UsageError(f"{f}: the file has no rows\ngive a file with at least one row, or leave it out")
        kind = kind_of(f)
        if kind not in ("jsonl", "parquet"):
            raise UsageError(f"{f}: a {kind} file; score --address reads plain JSONL and parquet files\n"
                             "unpack or convert it (e.g. gunzip), or score it without --address")
        kinds[f] = kind
    if len(set(kinds.values())) > 1:
        raise UsageError(f"{data}: both JSONL and parquet files ({', '.join(files)})\n"
                         "give files of one kind to score --address, or score them in two runs")
    # absolute: Ray Data's readers run in worker processes whose working folder is not this one
    return [os.path.abspath(f) for f in files], next(iter(kinds.values()))


class AnsweredScorer:
    """A :class:`~rewardhub.execution.Scorer` whose outcomes were computed on the cluster: ``score``
    finishes the batch that :attr:`wires` holds (``on_failure``, the aggregate), each outcome labelled
    with the row's place in the whole input."""

    cancels = False  # the outcomes are in already

    def __init__(self, terms: Sequence[Mapping[str, Any]], aggregation: str) -> None:
        from ..execution import TermFacts

        self.terms = [(str(t["name"]), float(t["weight"]), str(t["on_failure"])) for t in terms]
        self.facts = tuple(TermFacts.from_dict({**t, "executor": "ray"}) for t in terms)
        self.aggregation = aggregation
        self.wires: Mapping[str, Sequence[Any]] = {}

    def pool_figures(self) -> list[dict[str, Any]]:
        return []  # the run's: scored_batches reports the actor pool's

    def score(self, samples: Sequence[Any], progress: Callable[[int, int], None] | None = None, *,
              indices: Sequence[int] | None = None, defer_raise: bool = False, cancel: Any = None) -> Any:
        from ..execution import Column
        from ..execution import Outcome
        from ..execution import apply_on_failure
        from ..execution import combine

        labels = list(indices) if indices is not None else list(range(len(samples)))
        columns = {}
        for name, _, on_failure in self.terms:
            outs = [Outcome.from_wire(w) for w in self.wires[name]]
            if len(outs) != len(samples):
                raise RewardhubError(f"reward {name!r}: the cluster answered {len(outs)} outcomes for "
                                     f"{len(samples)} samples (a bug: report it)")
            for k, o in enumerate(outs):
                if isinstance(o.error, str) and o.error:  # the actor named the sample by its place there
                    o.error = _relabelled(o.error, k, labels[k])
            col = Column.from_outcomes(outs)
            col.labels = labels  # a failure is named by the row's place in the whole input
            apply_on_failure(name, "nan" if defer_raise and on_failure == "raise" else on_failure, col)
            columns[name] = col
        res = combine([(n, w) for n, w, _ in self.terms], self.aggregation, len(samples), columns)
        if progress is not None:
            progress(len(samples), len(samples))
        return res

    def provenance(self) -> list[dict[str, Any]]:
        return []

    def close(self) -> None:
        pass


def _relabelled(error: str, sent: int, label: int) -> str:
    """``error`` naming its sample by ``label`` (``row N``), not by ``sent`` (its place in the batch)."""
    import re

    from ..types import sample_name

    here = re.compile(rf"(?<![\w]){re.escape(f'sample {sent}')}(?!\d)")
    return here.sub(lambda _: sample_name(label), error, count=1)


class ScoreBlocks:
    """A Ray Data actor: the rows of a batch as local ``score`` reads them, and every term's raw outcomes
    (``on_failure`` is the driver's). Start-up never raises: a registry problem comes back in the first
    record (``hello``), so the driver names the node and the reward."""

    def __init__(self, setup: WorkerSetup, kind: str, prompt_key: str | None = None,
                 answer_key: str | None = None, namespace: str | None = None, encode: bool = True) -> None:
        from ._reward_worker import RewardWorker

        self.worker = RewardWorker(setup, index=0)
        self.kind, self.keys, self.namespace, self.encode = kind, (prompt_key, answer_key), namespace, encode
        self.needing = [t["name"] for t in self.worker.terms_info if t.get("needs_ground_truth")]

    def __call__(self, batch: Any) -> Any:
        import pyarrow as pa

        record: dict[str, Any]
        if self.worker.problems:
            record = {"hello": self.worker.hello()}
        else:
            try:
                rows = _rows(batch, self.kind)
            except (UsageError, ValueError, RecursionError) as exc:  # the driver says which file is bad
                rows, record = [], {"bad": str(exc).split("\n")[0] or type(exc).__name__}
            else:
                record = {"rows": rows}
                record.update(self._score(rows))
            record["pid"] = os.getpid()
        blob = pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL)
        return pa.table({"blob": pa.array([blob], type=pa.large_binary())})

    def _score(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        from ..datasets import Row
        from ..datasets import to_sample
        from ..scoring import missing_ground_truth

        samples = [to_sample(Row("", k + 1, r), prompt_key=self.keys[0], answer_key=self.keys[1])
                   for k, r in enumerate(rows)]
        if any("response" not in s and "messages" not in s for s in samples):
            return {"wires": None}  # the driver names the row
        skip = missing_ground_truth(samples, self.needing)
        ok = [s for i, s in enumerate(samples) if i not in skip]
        wires = self.worker.score(ok)["outcomes"] if ok else {}
        if any(w[3] for ws in wires.values() for w in ws):
            return {"wires": wires}  # a failure: the driver names its row by its place in the whole input
        try:
            return {"done": self._finish(rows, samples, skip, wires), "wires": None}
        except UsageError:  # a row the driver refuses, naming it
            return {"wires": wires}

    def _finish(self, rows: list[dict[str, Any]], samples: list[dict[str, Any]], skip: Any,
                wires: Any) -> dict[str, Any]:
        """A batch without a failure, finished here as the driver would (the rows' output, the columns)."""
        import json

        from ..execution import SlowestSamples
        from ..scoring import check_result_fields
        from ..scoring import output_row
        from ..scoring import score_rows

        check_result_fields(rows, 0, "", self.namespace)
        scorer = AnsweredScorer(self.worker.terms_info, self.worker.aggregation)
        scorer.wires = wires
        scored = score_rows(scorer, samples, skip)
        out = [output_row(r, x, self.namespace) for r, x in zip(rows, scored.results)]
        slowest = SlowestSamples()
        slowest.add(scored.columns, samples, 0)
        text = "".join(json.dumps(r, sort_keys=True, default=str, allow_nan=True) + "\n" for r in out) \
            if self.encode else None
        return {"first": rows[0] if rows else None, "n": len(rows), "text": text,
                "out": None if self.encode else out, "columns": scored.columns, "scores": scored.scores,
                "slowest": slowest}


def _rows(batch: Any, kind: str) -> list[dict[str, Any]]:
    """The rows of a Ray Data batch (a pyarrow table) as local ``score`` has them."""
    from .._datafiles import decode_line

    if kind == "parquet":
        return batch.to_pylist()  # type: ignore[no-any-return]
    rows = []
    for line in batch.column("text").to_pylist():
        line = line.removeprefix("\ufeff")
        if not line.strip():
            continue
        row = decode_line(line)
        if not isinstance(row, dict):
            raise UsageError(f"a JSON {type(row).__name__}, not an object: {line[:80]!r}\n"
                             "each line must be one JSON object")
        rows.append(row)
    return rows


def scored_batches(setup: WorkerSetup, files: Sequence[str], kind: str, *, prompt_key: str | None,
                   answer_key: str | None, namespace: str | None, encode: bool,
                   max_actors: int) -> Iterator[dict[str, Any]]:
    """The records of every batch of ``files``, in input order, streamed (Ray must be initialised)."""
    import logging

    import ray.data

    for name in ("ray.data", "ray.data._internal"):
        logging.getLogger(name).setLevel(logging.WARNING)  # its INFO lines would mix with the summary
    ctx = ray.data.DataContext.get_current()
    ctx.execution_options.preserve_order = True
    ctx.target_max_block_size = BLOCK_BYTES
    ctx.enable_progress_bars = False
    ctx.print_on_execution_start = False
    if kind == "jsonl":
        ds = ray.data.read_text(list(files), drop_empty_lines=True)
    else:
        ds = ray.data.read_parquet(list(files))
    workers = setup.reward_cfg.workers
    extra: dict[str, Any] = {"resources": dict(workers.resources)} if workers.resources else {}
    if workers.num_gpus:
        extra["num_gpus"] = workers.num_gpus
    # Ray Data's autoscaling actor pool: one actor at first, up to max_actors while batches wait
    pool = ray.data.ActorPoolStrategy(min_size=1, max_size=max(1, max_actors))
    ds = ds.map_batches(ScoreBlocks, batch_size=BATCH_ROWS, batch_format="pyarrow",
                        fn_constructor_args=(setup, kind, prompt_key, answer_key, namespace, encode),
                        compute=pool,
                        num_cpus=workers.num_cpus, **extra)
    block: Any
    for block in ds.iter_batches(batch_size=None, batch_format="pyarrow"):
        for blob in block.column("blob").to_pylist():
            yield pickle.loads(blob)
