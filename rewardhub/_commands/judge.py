"""``rewardhub judge calibrate CONFIG GOLD.jsonl``: how far a config's judge terms agree with labelled
examples (see :mod:`rewardhub.judging.calibrate`)."""

from __future__ import annotations

import argparse
import math
from typing import Any

from ..errors import UsageError
from ._common import dump_json

NAME = "judge"
HELP = "judge tools: `judge calibrate CONFIG GOLD.jsonl` scores labelled rows with the config's judge terms"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    cal = sub.add_parser("calibrate",
                         help="agreement, kappa or rho, position and length bias, cost per judge term")
    cal.add_argument("config", help="a config whose reward terms include judges")
    cal.add_argument("gold", help="JSON lines: samples with a human 'label' or 'score' each")
    cal.add_argument("--term", action="append", default=[],
                     help="calibrate this term only (repeatable; default: every judge term)")
    cal.add_argument("--json", action="store_true", help="machine-readable output")


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return "n/a" if math.isnan(v) else f"{v:.3f}"
    return str(v)


def run(args: argparse.Namespace) -> int:
    from ..builtin.judge import EXPENSIVE
    from ..builtin.judging.calibrate import calibrate_term
    from ..builtin.judging.calibrate import gold_rows
    from ..execution import Runner
    from ._common import load_plan_told

    if getattr(args, "action", None) != "calibrate":
        raise UsageError("rewardhub judge: name an action\nrewardhub judge calibrate CONFIG GOLD.jsonl")
    plan = load_plan_told(args.config, [])
    samples, gold, kind = gold_rows(args.gold)
    with Runner.from_config(plan.reward) as runner:
        terms = [t for t in runner.terms
                 if (t.name in args.term if args.term else EXPENSIVE in t.spec.capabilities)]
    missing = set(args.term) - {t.name for t in terms}
    if missing or not terms:
        named = " named " + ", ".join(sorted(missing)) if missing else ""
        raise UsageError(f"{args.config}: no judge term{named}"
                         "\nname a term with --term, or add a judge (llm_judge, llm_judge_pairwise, ...)")
    report = [{"term": t.name, "gold": args.gold, **calibrate_term(t, samples, gold, kind)} for t in terms]
    if args.json:
        dump_json(report)
        return 0
    keys = ("rows", "scored", "failed", "agreement", "kappa", "rho", "position_bias", "length_bias",
            "judge_calls", "judge_tokens", "seconds")
    for fig in report:
        print(f"{fig['term']} on {args.gold} ({kind}s):")
        for k in keys:
            if k in fig:
                print(f"  {k:<14} {_fmt(fig[k])}")
    return 0
