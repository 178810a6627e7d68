"""``rewardhub score --address ADDR`` (or ``RAY_ADDRESS``): the rows scored on a Ray cluster.

The input is streamed through Ray Data (:mod:`rewardhub.distributed._data`): no process holds more than
a few batches of it. This process writes what comes back, batch by batch in input order, with the same
code as local ``score``: each term's ``on_failure`` (a raised error names the row by its place in the
whole input), the output rows, the summary and ``--summary-json``. A stop (Ctrl-C, SIGTERM) keeps the
rows written so far (``OUTPUT.partial``), as local ``score`` does.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Callable
from collections.abc import Mapping
from typing import TYPE_CHECKING
from typing import Any

from ..errors import Interrupted
from ..errors import RewardhubError
from ..errors import UsageError
from ._chunk import say

if TYPE_CHECKING:
    from ..distributed import AnsweredScorer

__all__ = ["run_on_cluster"]

#: seconds ``ray.init`` may take to join a cluster whose port answers
CONNECT_S = 60.0


def run_on_cluster(args: argparse.Namespace, address: str, *, finish: Callable[..., int],
                   progress: Any) -> int:
    """Score ``args`` on the cluster at ``address``; ``finish`` and ``progress``: ``score``'s own end of a
    run and progress bar."""
    from ..distributed import AnsweredScorer
    from ..distributed import RewardWorker
    from ..distributed import cluster_files
    from ..distributed import prepare_setup
    from ..scorers import term_problems
    from ._common import load_plan_told
    from ._output import check_outputs

    if args.cache:
        raise UsageError(f"--cache {args.cache} with --address: the reward cache is a file of this machine\n"
                         "score without --address to use it, or leave --cache out")
    files, kind = cluster_files(args.data)
    check_outputs(args.output, args.summary_json, [args.config, *files])
    plan = load_plan_told(args.config, args.overrides)
    if getattr(plan.reward, "remote", None) is not None:
        raise UsageError(f"{args.config}: reward.remote is set: its rows are scored on that server, not "
                         f"on the cluster at {address}\n"
                         "leave out --address (with RAY_ADDRESS set: --address local)")
    with contextlib.redirect_stdout(sys.stderr):  # a reward module that prints when imported
        setup, registry = prepare_setup(plan.reward, pool="score")
        mine = RewardWorker(setup, index=-1)  # the terms as every actor resolves them
    if mine.problems:
        raise UsageError("the config's rewards cannot be loaded here:\n" + "\n".join(
            f"  {p.get('reward')}: {p.get('detail') or p.get('kind')}" for p in mine.problems))
    problems = [p for t in mine.terms for p in term_problems(t, registry)]  # what local score refuses
    mine.close()
    if problems:
        raise UsageError("\n".join(problems))
    scorer = AnsweredScorer(mine.terms_info, mine.aggregation)
    facts = scorer.facts
    groups = [f.name for f in facts if f.kind == "group"]
    if groups:
        raise UsageError(f"score --address: {', '.join(groups)} is a group reward, which needs whole groups "
                         "in one batch\nscore this config without --address")
    check_outputs(args.output, args.summary_json, [f.file for f in facts if f.file])
    ray = _connect(address)
    served: list[Any] = []
    try:
        from ..builtin.served import start_for_config

        # the judges' served models (serve:): started once, here; each actor attaches to them
        with contextlib.redirect_stdout(sys.stderr):
            served = start_for_config(setup.reward_cfg)
        return _score(args, plan, scorer, setup, mine.rewards, files, kind, ray, address,
                      (finish, progress))
    finally:
        with contextlib.redirect_stdout(sys.stderr):  # Ray's lines about the actors it stops
            while served:
                served.pop().close()
            ray.shutdown()


def _connect(address: str) -> Any:
    """Ray joined to the cluster at ``address``: one clear error where nothing answers there."""
    import os

    from .._extras import require
    from .._netprobe import connect_bounded
    from .._netprobe import probe_ray_address

    require("ray", "score --address (Ray Data)")
    require("ray.data", "score --address (Ray Data)", "pip install 'ray[data]'")
    flag = "--address" if os.environ.get("RAY_ADDRESS", "") != address else "RAY_ADDRESS"
    probe_ray_address(address, flag=flag)
    import logging

    logging.getLogger("ray").setLevel(logging.WARNING)  # "Connecting to existing Ray cluster at ..."
    return connect_bounded(address, CONNECT_S)


def _score(args: argparse.Namespace, plan: Any, scorer: AnsweredScorer, setup: Any,
           rewards: Mapping[str, Any], files: list[str], kind: str, ray: Any, address: str,
           score_parts: tuple[Any, Any]) -> int:
    from ..datasets import Row
    from ..datasets import count_rows
    from ..datasets import has_column
    from ..datasets import to_sample
    from ..distributed import RegistryMismatchError
    from ..distributed import scored_batches
    from ..execution import Column
    from ..execution import SlowestSamples
    from ..scoring import check_result_fields
    from ..scoring import missing_ground_truth
    from ..scoring import output_row
    from ..scoring import score_rows
    from ..types import InputRow
    from ._output import ScoredRows
    from ._output import prints_to_stderr
    from ._output import stop_on_signals
    finish, Progress = score_parts

    names = [f.name for f in scorer.facts]
    needing = [f.name for f in scorer.facts if f.needs_ground_truth]
    workers = setup.reward_cfg.workers
    cpus = float(ray.cluster_resources().get("CPU", 1.0))
    max_actors = workers.num_workers or max(1, int(cpus // max(workers.num_cpus, 0.001)))
    show = sys.stderr.isatty() and not args.no_progress
    progress = Progress(count_rows(files) if show else 0, show)
    columns: dict[str, Any] = {n: Column(0) for n in names}
    slowest = SlowestSamples()
    scores: list[Any] = []
    pids: set[int] = set()
    out = ScoredRows(args.output)
    out.namespace = args.namespace
    start, n_rows = time.monotonic(), 0
    try:
        with stop_on_signals(), out, prints_to_stderr(out):
            for record in scored_batches(setup, files, kind, prompt_key=args.prompt_key,
                                         answer_key=args.answer_key, namespace=args.namespace,
                                         encode=not out.parquet, max_actors=max_actors):
                if "hello" in record:
                    raise RegistryMismatchError(setup.pool, setup.driver_fingerprint, [record["hello"]])
                if "bad" in record:
                    raise UsageError(f"{args.data}: a line that is not one JSON object, after row {n_rows}: "
                                     f"{record['bad']}\neach line must be one JSON object; score without "
                                     "--address to have the row named")
                pids.add(record["pid"])
                done = record.get("done")
                if done:  # no failure in the batch: the actor finished it as this loop would
                    if n_rows == 0 and done["first"] is not None:
                        _check_rows(args, [done["first"]], [{"response": ""}], 0, has_column)
                    if done["text"] is not None:
                        out.write_text(done["text"], done["n"])
                    else:
                        out.write(done["out"])
                    for n in names:
                        columns[n].extend(done["columns"][n])
                    slowest.merge(done["slowest"], n_rows)
                    scores.extend(done["scores"])
                    n_rows += done["n"]
                    progress(n_rows)
                    continue
                rows = record["rows"]
                samples = [to_sample(Row(args.data, n_rows + k + 1, r), prompt_key=args.prompt_key,
                                     answer_key=args.answer_key) for k, r in enumerate(rows)]
                _check_rows(args, rows, samples, n_rows, has_column)
                check_result_fields(rows, n_rows, args.data, args.namespace)
                scorer.wires = record["wires"] or {}
                scored = score_rows(scorer, samples, missing_ground_truth(samples, needing),
                                    indices=[InputRow(n_rows + k) for k in range(len(rows))])
                out.write([output_row(r, x, args.namespace) for r, x in zip(rows, scored.results)])
                for n in names:
                    columns[n].extend(scored.columns[n])
                slowest.add(scored.columns, samples, n_rows)
                scores.extend(scored.scores)
                n_rows += len(rows)
                progress(n_rows)
    except Interrupted as exc:
        say(f"ERROR: interrupted ({exc.signal_name}) after {out.rows} rows; {out.where_kept()}")
        return 128 + exc.signum
    except RewardhubError:
        if out.kept:
            say(f"note: {out.where_kept()}")
        raise
    finally:
        progress.finish()
    used = [{"name": f.name, "reward": f.reward, **(rewards.get(f.reward) or {}), "executor": "ray"}
            for f in scorer.facts]
    pools = [{"pool": "score --address", "address": address, "actors": len(pids), "max_actors": max_actors}]
    return int(finish(args, plan, scorer.facts, columns, scores, slowest, n_rows=n_rows,
                             start=start, used=used, pools=pools))


def _check_rows(args: argparse.Namespace, rows: list[dict[str, Any]], samples: list[dict[str, Any]],
                offset: int, has_column: Any) -> None:
    """What local ``score`` refuses in a row, named by its place in the whole input."""
    for k, s in enumerate(samples):
        if "response" not in s and "messages" not in s:
            raise UsageError(
                f"{args.data}, row {offset + k + 1}: no 'response' column (nor 'messages', nor a verifiers "
                "trace in extra_info.trace)\nrows need response, and prompt, ground_truth (or verl's "
                "reward_model.ground_truth), data_source, extra_info; or a trajectory: messages (OpenAI "
                "chat format) in place of prompt and response")
    if offset == 0 and rows:
        for flag, key in (("--prompt-key", args.prompt_key), ("--answer-key", args.answer_key)):
            if key and not has_column(rows[0], key):
                raise UsageError(f"{flag} {key!r}: {args.data}, row 1 has no such column\n"
                                 f"its columns are: {', '.join(sorted(rows[0]))}")
