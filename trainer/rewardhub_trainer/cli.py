"""``rewardhub train CONFIG [KEY=VALUE ...] --output DIR [--resume DIR]``.

Discovered by the core CLI through the ``rewardhub.commands`` entry point (``NAME``, ``HELP``,
``add_arguments``, ``run``); ``rewardhub-train`` / ``python -m rewardhub_trainer`` run it alone.
Everything that can be wrong with the config is checked before Ray starts.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from typing import Any

NAME = "train"
HELP = "train a policy with GRPO on Ray (sync or fully_async), rewards from the registry"

__all__ = ["HELP", "NAME", "add_arguments", "main", "run", "train"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="YAML config with trainer/model/rollout/data/reward sections")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                        help="dotted overrides, e.g. trainer.mode=fully_async trainer.total_steps=20")
    parser.add_argument("--output", "-o", help="run folder (metrics, summary, plot, checkpoints); "
                        "defaults to the --resume folder")
    parser.add_argument("--resume", metavar="DIR", help="continue from the latest checkpoint in DIR")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def train(config: str | None, overrides: Sequence[str] = (), *, output: str,
          resume: str | None = None, callbacks: Sequence[Any] = (), progress: bool = False) -> dict[str, Any]:
    """Load, validate (before Ray), run and summarise; the programmatic form of the command."""
    from rewardhub.config import load_config

    from .prepare import prepare

    raw = load_config(config, tuple(overrides))
    prep = prepare(raw)  # raises UsageError before anything starts
    from .loop import Run
    from .loop import start_ray

    run_ = Run(prep, output, resume=resume, callbacks=tuple(callbacks))
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=prep.cfg.trainer.total_steps, initial=run_.step, desc=f"train ({prep.cfg.trainer.mode})",
                   unit="step", file=sys.stderr, dynamic_ncols=True)

        def _tick(step: int, metrics: Any, _run: Any) -> None:
            bar.update(1)
            bar.set_postfix(reward=f"{metrics['reward/mean']:.3f}",
                            sps=f"{metrics['throughput/samples_per_s']:.1f}",
                            stale=metrics["staleness"], refresh=False)

        run_.callbacks = (*run_.callbacks, _tick)
    start_ray()
    try:
        return run_.run()
    finally:
        if bar is not None:
            bar.close()


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
    first, last = summary.get("reward_first_fifth"), summary.get("reward_last_fifth")
    if first is not None and last is not None and not (math.isnan(first) or math.isnan(last)):
        verdict = "improved" if last > first else "did not improve"
        lines.append(f"reward: first fifth {first:.3f} -> last fifth {last:.3f} ({verdict})")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from rewardhub.errors import RewardhubError
    from rewardhub.errors import UsageError

    output = args.output or args.resume
    if not output:
        print("ERROR: --output: required (the folder the run writes to)", file=sys.stderr)
        return 2
    try:
        summary = train(args.config, args.overrides, output=output, resume=args.resume,
                        progress=not args.no_progress)
    except UsageError as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        return 2
    except RewardhubError as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        return 1
    print(_report(summary))
    print(f"outputs in {output}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rewardhub train", description=HELP)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
