"""What a reward worker pool says before its workers score: whether the cluster can place them, and
the differences in rewards the config does not use (a warning, never a stop)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from ..errors import UsageError

__all__ = ["check_placeable", "warn_unused_differences"]


def check_placeable(ray: Any, needs: Mapping[str, float], pool: str) -> None:
    """Raise a :class:`UsageError` listing every alive node when none has ``needs`` (one worker's)."""
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    if any(all(n["Resources"].get(k, 0.0) >= v for k, v in needs.items()) for n in nodes):
        return
    shown = "\n".join(f"  node {n['NodeManagerAddress']} (node id {n['NodeID'][:12]}): " + ", ".join(
        f"{k}={v:g}" for k, v in sorted(n["Resources"].items()) if not k.startswith(("node:", "memory",
                                                                                  "object_store")))
        for n in nodes)
    raise UsageError(f"reward worker pool {pool!r} cannot be placed: each worker needs "
                     f"{dict(needs)}, and no alive node has that\n{shown}\n"
                     "change reward.workers.resources / num_cpus / num_gpus, or add such a node")


def warn_unused_differences(infos: Sequence[Mapping[str, Any]], pool: str) -> None:
    """One ``WARNING:`` line on stderr per worker whose registry differs in rewards the config does
    not use (the workers' ``hello()`` ``notes``)."""
    for i in infos:
        if i.get("notes"):
            names = ", ".join(sorted(str(n["reward"]) for n in i["notes"]))
            print(
                f"WARNING: reward worker {i['index']} of pool {pool!r} on node {i.get('ip')} (node id "
                f"{str(i.get('node_id'))[:12]}): registry differs in rewards the config does not use: "
                f"{names}",
                file=sys.stderr,
                flush=True,
            )
