"""``rewardhub list``: what is registered, from where, at which version, and what is broken."""

from __future__ import annotations

import argparse

from ._common import add_registry_options
from ._common import dump_json
from ._common import registry_from_args
from ._common import spec_row
from ._common import table

NAME = "list"
HELP = "list registered rewards (or plugins) with their source, version and status"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="machine-readable output, sorted by name")
    parser.add_argument("--plugins", action="store_true", help="list plugins and their hooks instead")
    parser.add_argument("--requirements", action="store_true", help="print dist==version lines")
    parser.add_argument("--verbose", "-v", action="store_true", help="add target and error columns")
    add_registry_options(parser)


def _origin(row: dict[str, object]) -> str:
    if row.get("sources"):  # a conflict: every source that registers the name
        return " | ".join(map(str, row["sources"]))  # type: ignore[call-overload]
    if row["source"] == "builtin":
        return "builtin"
    if row["dist"]:
        return f"{row['dist']} {row['version']}"
    return str(row["source"])


def run(args: argparse.Namespace) -> int:
    registry = registry_from_args(args)
    if args.plugins:
        plugins = registry.plugins
        if args.json:
            dump_json(plugins)
        else:
            cells = [
                [
                    p["name"],
                    f"{p['dist']} {p['version']}" if p["dist"] else ("builtin" if p["builtin"] else "-"),
                    p["status"],
                    ", ".join(p["hooks"]) if p["status"] == "ok" else p["error"],
                ]
                for p in plugins
            ]
            print(table(cells, ["plugin", "dist", "status", "hooks"]))
        return 0
    specs = registry.list_rewards()
    if args.requirements:
        reqs = sorted({f"{s.dist}=={s.version}" for s in specs if s.dist})
        print("\n".join(reqs))
        return 0
    rows = [spec_row(s) for s in specs]
    for row in rows:
        if row["status"] == "conflict":
            row["sources"] = [s.origin for s in registry.conflicts[row["name"]]]
    if args.json:
        dump_json(rows)
        return 0
    if args.verbose:
        body = [[r["name"], r["source"], _origin(r), r["status"], r["policy_text"], r["reads"], r["target"],
                 r["error"] or r["summary"]] for r in rows]
        print(table(body, ["name", "source", "from", "status", "policy", "reads", "target",
                           "summary / error"]))
    else:
        body = [[r["name"], _origin(r), r["status"], r["policy_text"], r["reads"],
                 (f"ERROR: {r['error']}" if r["error"] else r["summary"])] for r in rows]
        print(table(body, ["name", "from", "status", "policy", "reads", "summary"]))
    broken = sum(r["status"] == "broken" for r in rows)
    conflicts = sum(r["status"] == "conflict" for r in rows)
    also = (
        f", {conflicts} conflicting (a config that uses one chooses with reward.plugins.prefer)"
        if conflicts
        else ""
    )
    print(f"\n{len(rows)} rewards, {broken} broken{also}; fingerprint {registry.fingerprint()}")
    return 0
