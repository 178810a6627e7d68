"""``rewardhub test REWARD [DATA]``: the reward contract (see :mod:`rewardhub._contract`) as a table; exit 1
on a failure."""

from __future__ import annotations

import argparse
import math
import os
import sys

from ..config.schema import RewardConfig
from ..errors import UsageError
from ._common import table

NAME = "test"
HELP = ("check a reward's contract (a float for every row, edge responses, timeout, determinism, the same "
        "scores on every executor); REWARD: a registered name or a config file")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "reward",
        help="a registered reward name (see `rewardhub list`), or a YAML config whose "
        "reward: terms are tested",
    )
    parser.add_argument(
        "data", nargs="?", help="JSONL or parquet rows to score (default: three small built-in rows)"
    )
    parser.add_argument("--kwargs", metavar="JSON", help="keyword arguments for a named reward, e.g. "
                                                         "'{\"pattern\": \"\\\\d+\"}'")
    parser.add_argument("--executors", help="executors compared (default inline,process, and ray when the "
                                            "reward declares executor: ray; ray only where it is installed)")
    parser.add_argument("--ray", action="store_true",
                        help="compare the ray executor too (starts a local Ray: seconds)")
    parser.add_argument("--timeout", type=float, default=10.0,
                        help="seconds a call may take when the reward declares no timeout_s (default 10)")
    parser.add_argument("--rows", type=int, default=64, help="at most this many rows of DATA (default 64)")
    parser.add_argument("--json", action="store_true", help="print the checks as JSON")


def section_to_test(reward: str, kwargs: str | None) -> RewardConfig:
    """The ``reward:`` section to test: a config file's, or one term naming a registered reward."""
    import json

    from ..config import load_plan
    from ..config.schema import validate_reward

    if os.path.isfile(reward) or reward.endswith((".yaml", ".yml", ".json")):
        if kwargs:
            raise UsageError("--kwargs is for a named reward; a config file's terms have their own kwargs")
        return load_plan(reward).reward
    try:
        kw = json.loads(kwargs) if kwargs else {}
    except json.JSONDecodeError as exc:
        raise UsageError(f"--kwargs is not JSON: {exc}") from None
    if not isinstance(kw, dict):
        raise UsageError("--kwargs must be a JSON object, e.g. '{\"pattern\": \"x\"}'")
    from ..errors import UnknownRewardError
    from ..registry import get_registry

    try:
        get_registry().get_reward(reward)
    except UnknownRewardError as exc:
        raise UsageError(f"{exc}\nor name a config file") from None
    return validate_reward({"rewards": [{"name": reward, "kwargs": kw}]})


def run(args: argparse.Namespace) -> int:
    import itertools

    from .._contract import EXECUTORS
    from .._contract import FAIL
    from .._contract import run_contract
    from ..scoring import read_pairs
    from ._common import dump_json
    from ._output import prints_to_stderr

    executors = [e.strip() for e in (args.executors or "").split(",") if e.strip()] or None
    if args.executors is not None and (not executors or any(e not in EXECUTORS for e in executors)):
        raise UsageError(f"--executors {args.executors!r}: choose from {', '.join(EXECUTORS)}")
    if args.ray:
        executors = list(dict.fromkeys([*(executors or ("inline", "process")), "ray"]))
    if not 0 < args.timeout < math.inf or args.rows <= 0:
        raise UsageError(f"--timeout {args.timeout:g} --rows {args.rows}: give a number of seconds above 0 "
                         "(not inf or nan) and a number of rows above 0")
    section = section_to_test(args.reward, args.kwargs)
    rows = [s for _, s in itertools.islice(read_pairs(args.data), args.rows)] if args.data else None
    if args.data and not rows:
        raise UsageError(f"{args.data}: no rows")
    with prints_to_stderr():  # what the reward prints never lands among the checks (--json)
        checks = run_contract(section, rows, executors=executors, default_timeout_s=args.timeout)
    failed = [c for c in checks if c.status == FAIL]
    if args.json:
        dump_json([c.__dict__ for c in checks])
    else:
        print(table([[c.term, c.contract, c.status, c.detail] for c in checks],
                    ["reward", "contract", "result", "detail"]))
        for c in failed:
            if c.where:
                print(f"\n{c.term} / {c.contract}: where the reward failed (most recent call last):\n"
                      f"{c.where}")
        terms = len({c.term for c in checks})
        print(
            f"\n{terms} reward{'s' * (terms != 1)}: "
            + (
                f"{len(failed)} contract{'s' * (len(failed) != 1)} failed"
                if failed
                else "every contract holds"
            ),
            file=sys.stderr,
        )
    return 1 if failed else 0
