"""``rewardhub train CONFIG [KEY=VALUE ...] --output DIR [--resume DIR]``.

Discovered by the core CLI through the ``rewardhub.commands`` entry point (``NAME``, ``HELP``,
``add_arguments``, ``run``); ``rewardhub-train`` / ``python -m rewardhub_trainer`` run it alone.
Everything that can be wrong with the config is checked before Ray starts.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

NAME = "train"
HELP = "train a policy with GRPO on Ray (sync or fully_async), rewards from the registry"

__all__ = ["HELP", "NAME", "add_arguments", "main", "run", "train"]

#: seconds to join the cluster at RAY_ADDRESS (a port that answers, but not as Ray's, is given up then)
RAY_CONNECT_S = 30.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="YAML config with trainer/model/rollout/data/reward sections")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                        help="dotted overrides, e.g. trainer.mode=fully_async trainer.total_steps=20")
    parser.add_argument("--output", "-o", help="run folder (metrics, summary, plot, checkpoints); "
                        "defaults to the --resume folder")
    parser.add_argument("--resume", metavar="DIR", help="continue from the latest checkpoint in DIR")
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the run in the --output folder (its files are removed once the new run starts)",
    )
    parser.add_argument("--allow-reward-change", action="store_true",
                        help="with --resume: go on although a reward's code changed since the checkpoint "
                        "(a reward file's sha256, a plugin's version); refused otherwise")
    parser.add_argument("--allow-config-change", action="store_true",
                        help="with --resume: go on from the checkpoint although the model, data or reward "
                        "section differs from the run's (a warning names the sections); refused otherwise")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def train(config: Any, overrides: Sequence[str] = (), *, output: str | None,
          resume: str | None = None, callbacks: Sequence[Any] = (), progress: bool = False,
          overwrite: bool = False, allow_reward_change: bool = False,
          allow_config_change: bool = False) -> dict[str, Any]:
    """Load, validate (before Ray), run and summarise; the programmatic form of the command.

    ``output`` may hold another run only when ``resume`` names it (same config) or with ``overwrite``
    (:mod:`rewardhub_trainer.runfolder`). Once Ray has started, SIGTERM raises
    :class:`rewardhub.Interrupted` (the actors are stopped on the way out).

    :param config: a config file (``None``: overrides only), or a
        :class:`rewardhub.config.ConfigPlan` loaded already (then ``overrides`` must be empty).
    """
    from rewardhub.config import ConfigPlan
    from rewardhub.config import load_plan

    from .prepare import prepare
    from .runfolder import RunFolder

    _probe_ray_address()  # before anything slow
    plan = config if isinstance(config, ConfigPlan) else load_plan(config, tuple(overrides))
    # the folder is this run's from here: a second run into it is refused before the model, data or Ray
    folder = RunFolder(output) if output else None
    try:
        prep = prepare(plan)  # raises UsageError before anything starts
        output = output or prep.cfg.trainer.default_local_dir
        if not output:
            from rewardhub.errors import UsageError

            raise UsageError(
                "--output: required (the folder the run writes to; or trainer.default_local_dir)")
        folder = folder or RunFolder(output)
        report = _data_report(prep.data_report, prep.cfg.data.max_prompt_length)
        if report and (prep.cfg.data.train_files or prep.cfg.data.val_files):
            print(report, file=sys.stderr)
        from .loop import Run

        # absolute: the actors (the learner writes checkpoints) may run in another working directory
        run_ = Run(prep, folder.path, resume=resume, callbacks=tuple(callbacks), overwrite=overwrite,
                   allow_reward_change=allow_reward_change, allow_config_change=allow_config_change,
                   folder=folder)
    except BaseException:
        if folder is not None:
            folder.release(discard=True)  # refused: no empty folder left behind
        raise
    try:
        return _run(run_, prep, progress)
    finally:
        folder.release(discard=True)  # free again, however it ended (and gone if nothing was written)


def _probe_ray_address() -> None:
    """``RAY_ADDRESS`` where nothing listens: one error now (Ray would retry for minutes)."""
    address = os.environ.get("RAY_ADDRESS")
    if address:
        from rewardhub.distributed import probe_ray_address

        probe_ray_address(address, flag="RAY_ADDRESS")


def _start_ray() -> None:
    """Join the cluster at ``RAY_ADDRESS`` (given up after :data:`RAY_CONNECT_S` when its port answers but
    not as Ray's; SIGTERM and Ctrl-C end the wait), else start a local Ray."""
    import ray

    from rewardhub.distributed import ensure_ray

    from .fleet import starting

    address = os.environ.get("RAY_ADDRESS")
    # a local Ray gets at least 4 logical CPUs: the learner, rollouters and reward workers each reserve CPUs
    cpus = max(4, os.cpu_count() or 1)
    if ray.is_initialized():
        starting("in the Ray this process runs")
    elif address:
        from rewardhub.distributed import connect_bounded

        starting(f"joining the Ray cluster at RAY_ADDRESS={address}")
        connect_bounded(address, RAY_CONNECT_S)
    else:
        starting(f"a local Ray ({cpus} CPUs; RAY_ADDRESS joins a cluster instead)")
    ensure_ray(num_cpus=cpus)


def _run(run_: Any, prep: Any, progress: bool) -> dict[str, Any]:
    """Progress bar, trackers and Ray around :meth:`Run.run`."""
    bars: list[Any] = []
    if progress:
        from tqdm import tqdm

        from .reward_failures import progress_postfix

        def _open_bar(started: Any) -> None:  # once the actors are up: until then, the start's own lines
            bars.append(tqdm(total=prep.cfg.trainer.total_steps, initial=started.ledger.step,
                             desc=f"train ({prep.cfg.trainer.mode})", unit="step", file=sys.stderr,
                             dynamic_ncols=True))

        def _tick(step: int, metrics: Any, _run: Any) -> None:
            bar = bars[0]
            bar.update(1)
            bar.set_postfix(reward=f"{metrics['reward/mean']:.3f}",
                            sps=f"{metrics['throughput/samples_per_s']:.1f}",
                            stale=metrics["staleness"], **progress_postfix(metrics), refresh=False)

        run_.start_callbacks = (_open_bar,)
        run_.callbacks = (*run_.callbacks, _tick)
    from .loggers import Trackers
    from .loggers import logger_names

    t = prep.cfg.trainer
    trackers = Trackers(
        logger_names(t.logger),
        run_.out,
        project=t.project_name,
        experiment=t.experiment_name,
        config=prep.public_config(),
    )
    run_.callbacks = (*run_.callbacks, trackers.log)
    run_.val_callbacks = (trackers.log,)  # evaluations (evaluate.py)
    old = None
    try:
        _start_ray()
        old = _sigterm_raises()  # after ray.init, which sets its own (sys.exit(15))
    except SystemExit as exc:  # SIGTERM while Ray starts: its handler's exit, as a signal
        if exc.code != signal.SIGTERM:
            raise
        from rewardhub.errors import Interrupted

        trackers.close()
        raise Interrupted("SIGTERM") from None
    try:
        summary: dict[str, Any] = run_.run()
        return summary
    except KeyboardInterrupt as exc:
        raise _as_signal(exc) from None
    finally:
        if old is not None:
            signal.signal(signal.SIGTERM, old)
        trackers.close()
        for bar in bars:
            bar.close()


#: the signal :func:`_sigterm_raises`'s handler last received (None: none since it was installed)
_received: list[str | None] = [None]


def _sigterm_raises() -> Any:
    """SIGTERM raises :class:`rewardhub.Interrupted` in the main thread; the handler it replaces (None: not
    the main thread).

    The handler also remembers the signal: where it lands inside ``ray.get`` or ``ray.wait`` (nearly all
    of a run), Ray turns the handler's exception into a plain ``KeyboardInterrupt``, which
    :func:`_as_signal` turns back.
    """
    import threading

    from rewardhub.errors import Interrupted

    if threading.current_thread() is not threading.main_thread():
        return None
    _received[0] = None

    def on_sigterm(signum: int, frame: Any) -> None:
        _received[0] = "SIGTERM"
        raise Interrupted("SIGTERM")

    return signal.signal(signal.SIGTERM, on_sigterm)


def _as_signal(exc: KeyboardInterrupt) -> KeyboardInterrupt:
    """``exc`` as the :class:`rewardhub.Interrupted` of the signal that caused it (SIGTERM, when its handler
    ran: Ray may have replaced the handler's exception on the way), else ``exc`` itself (Ctrl-C)."""
    from rewardhub.errors import Interrupted

    if isinstance(exc, Interrupted) or _received[0] is None:
        return exc
    return Interrupted(_received[0])


def _data_report(counts: dict[str, Any], limit: int) -> str:
    """``data: 20 train rows (4 filtered: longer than data.max_prompt_length=80 tokens), 4 val rows``."""
    parts = []
    for split in ("train", "val"):
        if f"{split}_rows" in counts:
            filtered = counts.get(f"{split}_filtered", 0)
            why = f" ({filtered} filtered: longer than data.max_prompt_length={limit} tokens)"
            parts.append(f"{counts[f'{split}_rows']} {split} rows" + (why if filtered else ""))
    return "data: " + ", ".join(parts) if parts else ""


def _report(summary: dict[str, Any]) -> str:
    lines = [
        f"mode {summary['mode']}: {summary['steps']} steps in {summary['wall_s']:.1f}s, "
        f"{summary['throughput_samples_per_s']:.2f} samples trained/s",
        f"samples: generated {summary['samples_generated']} = trained {summary['samples_trained']} "
        f"+ dropped stale {summary['samples_dropped_stale']} + unused {summary['samples_unused_at_end']}"
        f" + lost on restart {summary.get('samples_lost_on_restart', 0)}"
        f"; max staleness {summary['max_staleness_seen']} (limit {summary['staleness_limit']})",
        f"idle ratio: rollouter {summary['idle_ratio']['rollouter']:.2f}, "
        f"learner {summary['idle_ratio']['learner']:.2f}; weight syncs {summary['weight_syncs']}",
    ]
    failed = {name: rate for name, rate in (summary.get("reward_error_rate") or {}).items() if rate}
    if failed:
        lines.append(
            "reward errors: "
            + ", ".join(f"{name} {rate:.1%} of calls failed" for name, rate in failed.items())
            + f"; {summary.get('samples_invalid', 0)} samples invalid (left out of the update)"
        )
    first, last = summary.get("reward_first_fifth"), summary.get("reward_last_fifth")
    if first is not None and last is not None and not (math.isnan(first) or math.isnan(last)):
        verdict = "improved" if last > first else "did not improve"
        lines.append(f"reward: first fifth {first:.3f} -> last fifth {last:.3f} ({verdict})")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """The command, as the core CLI calls it; its errors go to the core CLI's one handler
    (:func:`rewardhub.cli.main`: one ``ERROR:`` line, exit code 2 for bad input, 1 otherwise)."""
    from rewardhub.errors import Interrupted

    output = args.output or args.resume  # else trainer.default_local_dir (verl's), checked by train()
    old = _sigterm_raises()
    try:
        summary = train(args.config, args.overrides, output=output, resume=args.resume,
                        progress=not args.no_progress, overwrite=args.overwrite,
                        allow_reward_change=args.allow_reward_change,
                        allow_config_change=args.allow_config_change)
    except KeyboardInterrupt as caught:  # a SIGTERM wherever it landed (Ray may have made it a plain one)
        exc = _as_signal(caught)
        if not isinstance(exc, Interrupted):  # Ctrl-C: Ray's handler raises a plain one
            exc = Interrupted("SIGINT")
        print("ERROR: terminated" if exc.signal_name == "SIGTERM" else "ERROR: interrupted", file=sys.stderr)
        return 143 if exc.signal_name == "SIGTERM" else 130
    finally:
        if old is not None:
            signal.signal(signal.SIGTERM, old)
    print(_report(summary))
    print(f"outputs in {output or os.path.dirname(summary['metrics'])}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``rewardhub-train ARGS`` / ``python -m rewardhub_trainer ARGS``: ``rewardhub train ARGS``, through
    the core CLI (the same parsing, error lines and exit codes)."""
    from rewardhub.cli import main as rewardhub_main

    return rewardhub_main([NAME, *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
