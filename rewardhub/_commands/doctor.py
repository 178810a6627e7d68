"""``rewardhub doctor [CONFIG] [KEY=VALUE ...]``: check that every Ray node resolves the same rewards."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from ._common import dump_json

NAME = "doctor"
#: seconds Ray may take to connect to a cluster whose port answers before doctor gives up
CONNECT_S = 10.0
HELP = "cluster preflight: on every Ray node, build the registry and resolve the config's rewards"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("args", nargs="*", metavar="[CONFIG] [KEY=VALUE ...]",
                        help="a YAML config with a reward: section, then overrides; a node that differs in a "
                             "reward the config uses is an error, in any other reward a warning")
    parser.add_argument("--address", help="Ray cluster to check (default: reward.workers.address, else a "
                                          "local Ray is started)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON (sorted keys)")
    parser.add_argument("--no-ship-files", action="store_true",
                        help="do not ship reward files: each node must have them at the same path")
    parser.add_argument("--strict", action="store_true",
                        help="a difference in any reward is a problem, not only in those the config uses")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for each node")


def _split(args: list[str]) -> tuple[str | None, list[str]]:
    if (
        args
        and "=" not in args[0]
        and (args[0].endswith((".yaml", ".yml", ".json")) or os.path.isfile(args[0]))
    ):
        return args[0], args[1:]
    return None, args


def _human(report: dict[str, Any]) -> str:
    lines = [f"driver fingerprint {report['fingerprint']} ({report['registry_size']} rewards; config uses: "
             f"{', '.join(report['rewards']) or '(none: every reward is compared)'})"]
    for n in report["nodes"]:
        state = "ok" if n["ok"] else f"{len(n['problems'])} problem(s)"
        lines.append(f"node {n['ip']}  id {n['node_id'][:12]}{'  head' if n['is_head'] else ''}  "
                     f"fingerprint {n['fingerprint'] or '-'}  pools: {', '.join(n['pools']) or '-'}  {state}")
        lines += [f"    {p}" for p in n["problems"]]
        lines += [f"    WARNING: {p}" for p in n["warnings"]]
    for p in report["pools"]:
        needs = ", ".join(f"{k}={v:g}" for k, v in sorted(p["needs"].items())) or "nothing"
        where = ", ".join(x[:12] for x in p["nodes"]) or "NO alive node"
        lines.append(
            f"pool {p['pool']!r} (each worker needs {needs}): {where}{'' if p['ok'] else '  PROBLEM'}"
        )
    return "\n".join(lines)


def _plugin_lines(plan: Any, report: dict[str, Any]) -> list[str]:
    """What plugins add to the report (``rewardhub_doctor_lines``): the trainer, when installed, says where
    its learner, rollouters and reward workers would go (its ``resources:``). A plugin that fails is a
    warning naming it."""
    from ..registry import plugin_manager

    pm = plugin_manager(plan.reward)
    lines: list[str] = []
    for name, result in pm.call_each("rewardhub_doctor_lines", "rewardhub_doctor_lines: ",
                                        config=plan.config, nodes=report["nodes"]):
        if result is None:
            continue
        if isinstance(result, str) or not all(isinstance(x, str) for x in result):
            _plugin_warning(pm, name, f"returned {type(result).__name__}, not a list of lines")
            continue
        lines.extend(result)
    for name, (_, _, error) in pm.broken.items():
        if error.startswith("rewardhub_doctor_lines: "):
            _plugin_warning(pm, name, error.partition(": ")[2])
    return lines


def _plugin_warning(pm: Any, name: str, why: str) -> None:
    dist, version = pm.dist_of(name)
    who = f"{name} (from {dist} {version or ''}".rstrip() + ")" if dist else name
    print(f"WARNING: plugin {who}: rewardhub_doctor_lines {why}; its lines are left out", file=sys.stderr)


def _warn(report: dict[str, Any]) -> None:
    """One line on stderr when nodes differ only in rewards the config does not use."""
    nodes = [n for n in report["nodes"] if n["warnings"]]
    if not nodes:
        return
    names = ", ".join(map(repr, sorted({r for n in nodes for r in n["warned_rewards"]})))
    why = (
        f"{names}, which the config does not use (a run with this config is not blocked"
        if report["rewards"]
        else f"{names} (no config names a reward, so none blocks a run"
    )
    print(f"WARNING: {len(nodes)} of {len(report['nodes'])} nodes differ from the driver in reward(s) {why}; "
          "--strict makes any difference a problem)", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    from .._extras import require
    from ..config import load_plan
    from ..distributed import check_cluster

    config, overrides = _split(list(args.args))
    plan = load_plan(config, overrides)
    address = args.address or plan.reward.workers.address
    if address:  # where nothing listens: one error at once, before Ray is even imported
        from .._netprobe import probe_ray_address

        probe_ray_address(address, flag="--address" if args.address else "reward.workers.address")
    require("ray", "rewardhub doctor (it checks the reward workers of a Ray cluster)")
    if address:
        from .._netprobe import connect_bounded

        connect_bounded(address, CONNECT_S)
    report = check_cluster(plan.reward, address=args.address, ship_files=not args.no_ship_files,
                           strict=args.strict, timeout_s=args.timeout)
    report["trainer_pools"] = _plugin_lines(plan, report)
    if args.json:
        dump_json(report)
    else:
        print(_human(report))
        print("\n".join(report["trainer_pools"]))
    if any("PROBLEM" in line for line in report["trainer_pools"]):
        print("ERROR: the trainer's pools do not fit this cluster (see resources: above)", file=sys.stderr)
        return 1
    if report["ok"]:
        _warn(report)
        return 0
    bad = sorted({p.split("'")[1] for n in report["nodes"] for p in n["problems"] if "'" in p})
    nodes = [n for n in report["nodes"] if not n["ok"]]
    pools = [p["pool"] for p in report["pools"] if not p["nodes"]]
    msg = f"ERROR: {len(nodes)} of {len(report['nodes'])} nodes differ from the driver"
    if bad:
        msg += f" in reward(s) {', '.join(map(repr, bad))}"
    if pools:
        msg += f"; pool(s) {', '.join(map(repr, pools))} fit no alive node"
    print(msg, file=sys.stderr)
    return 1
