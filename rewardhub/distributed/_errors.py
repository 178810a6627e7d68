"""Errors of the reward workers: each names the reward, the node, the pool and the difference."""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from ..errors import RewardhubError
from ..errors import UsageError

__all__ = ["DriverOnlyRewardError", "RegistryMismatchError", "WorkerFailedError", "describe_problem"]

#: at most this many problem lines in one message (the rest are counted)
_MAX_LINES = 20


#: a problem's line by its ``kind``, filled from its fields (``detail_note``: `` (detail)`` or empty)
_PROBLEM_LINES = {
    "missing": "reward {reward!r} is missing on the worker (driver has {driver})",
    "version": "reward {reward!r} has a different version: driver {driver}, worker {worker}",
    "target": "reward {reward!r} has a different target: driver {driver}, worker {worker}",
    "file_hash": "reward {reward!r} file hash differs: driver {driver}, worker {worker}{detail_note}",
    "file_missing": "reward {reward!r}: file {detail!r} does not exist on the node and was not shipped",
    "mismatched": "reward {reward!r} differs: driver {driver}, worker {worker}",
    "extra": "reward {reward!r} exists only on the worker ({worker})",
    "broken": "reward {reward!r} cannot be loaded on the worker: {detail}",
}


def describe_problem(p: Mapping[str, Any]) -> str:
    """One line for one problem dict (``kind``, ``reward``, ``driver``, ``worker``, ``detail``)."""
    fields = {k: p.get(k) for k in ("reward", "driver", "worker", "detail")}
    line = _PROBLEM_LINES.get(str(p.get("kind")))
    if line is not None:
        return line.format(**fields, detail_note=f" ({p['detail']})" if p.get("detail") else "")
    return f"reward {fields['reward']!r}: {fields['detail']}" if fields["reward"] else str(fields["detail"])


def _grouped(problems: Sequence[Mapping[str, Any]]) -> list[str]:
    """One phrase per difference and node (workers of one node that differ alike are named together)."""
    groups: dict[tuple[str, ...], list[int]] = {}
    for p in problems:
        key = (str(p.get("pool")), str(p.get("ip") or "?"), str(p.get("node_id") or "?")[:12],
               " ".join(describe_problem(p).split()))
        idx = p.get("index")
        groups.setdefault(key, []).extend([idx] if isinstance(idx, int) and idx >= 0 else [])
    out = []
    for (pool, ip, node_id, what), idx in groups.items():
        who = (f"worker {idx[0]}" if len(idx) == 1 else f"workers {', '.join(map(str, sorted(set(idx))))}"
               if idx else "probe")
        node = f"node {ip}, node id {node_id}" if node_id != "?" else "node not known"
        out.append(f"{what} ({node}, {who} of pool {pool!r})")
    return out


class RegistryMismatchError(RewardhubError):
    """A reward worker's registry differs from the driver's in a reward the config uses (raised at
    start-up, before scoring).

    The message is one line: each differing reward with the driver's and the worker's values
    (``dist==version`` or a file's sha256) and the node, then the fix.

    :ivar problems: one dict per difference: ``pool``, ``node_id``, ``ip``, ``index``, ``reward``,
        ``kind`` (missing | version | target | file_hash | file_missing | mismatched | broken | error),
        ``driver``, ``worker``, ``detail``.
    :ivar rewards: the names of the rewards that differ.
    """

    __module__ = "rewardhub"

    def __init__(self, pool: str, driver_fingerprint: str, workers: Sequence[Mapping[str, Any]]) -> None:
        self.pool = pool
        self.driver_fingerprint = driver_fingerprint
        self.problems: list[dict[str, Any]] = []
        for w in workers:
            for p in w.get("problems") or ():
                self.problems.append({"pool": w.get("pool"), "node_id": w.get("node_id"), "ip": w.get("ip"),
                                      "index": w.get("index"), **p})
        self.rewards = sorted({str(p["reward"]) for p in self.problems if p.get("reward")})
        parts = _grouped(self.problems)
        shown = parts[:_MAX_LINES] + (
            [f"and {len(parts) - _MAX_LINES} more"] if len(parts) > _MAX_LINES else []
        )
        if self.rewards:
            lead = f"reward workers of pool {pool!r} differ from the driver in a reward the config uses: "
            fix = (
                "install the same distributions (and reward files) on every node that runs reward workers; "
                "`rewardhub doctor CONFIG` checks each node"
            )
        else:
            lead = f"reward workers of pool {pool!r} could not start: "
            fix = "`rewardhub doctor CONFIG` checks each node"
        super().__init__(lead + "; ".join(shown) + f" -- {fix}")


class DriverOnlyRewardError(UsageError):
    """A reward exists only in the driver (an ``@reward`` in ``__main__``): workers cannot import it."""

    __module__ = "rewardhub"

    def __init__(self, message: str, *, reward: str, module: str) -> None:
        super().__init__(message)
        self.reward = reward
        self.module = module


class WorkerFailedError(RewardhubError):
    """Reward workers kept dying, or one raised something that is not a reward failure."""

    __module__ = "rewardhub"

    def __init__(self, message: str, *, pool: str, node_id: str | None = None) -> None:
        super().__init__(message)
        self.pool = pool
        self.node_id = node_id
