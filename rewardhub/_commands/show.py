"""``rewardhub show NAME``: one reward's signature, docstring, file, dist and capabilities."""

from __future__ import annotations

import argparse
import inspect

from ..types import RewardSpec
from ._common import add_registry_options
from ._common import dump_json
from ._common import registry_from_args
from ._common import spec_row

NAME = "show"
HELP = "show one reward: signature, docstring, source file, distribution, capabilities, policy"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="registered reward name")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    add_registry_options(parser)


def run(args: argparse.Namespace) -> int:
    registry = registry_from_args(args)
    spec = registry.get_reward(args.name)
    spec, fn = registry.load_full(spec)
    target = getattr(fn, "func", fn)
    try:
        signature = f"{spec.name}{inspect.signature(target)}"
    except (TypeError, ValueError):
        signature = f"{spec.name}(...)"
    try:
        source_file = inspect.getsourcefile(target) or "?"
    except TypeError:
        source_file = "?"
    row = spec_row(spec, loaded=True)
    row.update(
        signature=signature,
        doc=inspect.getdoc(target) or "",
        file=source_file,
        runs_on=_runs_on(spec),
        params=dict(spec.params),
    )
    if args.json:
        dump_json(row)
        return 0
    print(signature)
    print()
    for key in ("source", "dist", "version", "target", "file", "kind", "reads", "capabilities",
                "data_sources", "policy", "runs_on", "params"):
        value = row[key]
        if value in (None, [], {}, ""):
            continue
        print(f"{key + ':':14} {value}")
    if row["doc"]:
        print()
        print(row["doc"])
    return 0


def _runs_on(spec: RewardSpec) -> str:
    """The executor the reward's own policy really runs it on, and why."""
    pol = spec.policy
    if pol.executor == "inline" and pol.timeout_s and "async" not in spec.capabilities:
        return (f"process (inline with timeout_s {pol.timeout_s:g}: a sync call is timed out by killing its "
                "process)")
    return pol.executor
