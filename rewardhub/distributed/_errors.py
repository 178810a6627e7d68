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


def describe_problem(p: Mapping[str, Any]) -> str:
    """One line for one problem dict (``kind``, ``reward``, ``driver``, ``worker``, ``detail``)."""
    kind, reward = p.get("kind"), p.get("reward")
    if kind == "missing":
        return f"reward {reward!r} is missing on the worker (driver has {p.get('driver')})"
    if kind == "version":
        return f"reward {reward!r} has a different version: driver {p.get('driver')}, worker {p.get('worker')}"
    if kind == "file_hash":
        return f"reward {reward!r} file hash differs: driver {p.get('driver')}, worker {p.get('worker')}" + (
            f" ({p['detail']})" if p.get("detail") else "")
    if kind == "file_missing":
        return f"reward {reward!r}: file {p.get('detail')!r} does not exist on the node and was not shipped"
    if kind == "mismatched":
        return f"reward {reward!r} differs: driver {p.get('driver')}, worker {p.get('worker')}"
    if kind == "extra":
        return f"reward {reward!r} exists only on the worker ({p.get('worker')})"
    if kind == "broken":
        return f"reward {reward!r} cannot be loaded on the worker: {p.get('detail')}"
    if reward:
        return f"reward {reward!r}: {p.get('detail')}"
    return str(p.get("detail"))


def _where(w: Mapping[str, Any]) -> str:
    node_id = str(w.get("node_id") or "?")
    idx = w.get("index")
    who = f"worker {idx}" if isinstance(idx, int) and idx >= 0 else "probe"
    return f"{who} of pool {w.get('pool')!r} on node {w.get('ip') or '?'} (node id {node_id[:12]})"


class RegistryMismatchError(RewardhubError):
    """A reward worker's registry differs from the driver's (raised at start-up, before scoring).

    :ivar problems: one dict per difference: ``pool``, ``node_id``, ``ip``, ``index``, ``reward``,
        ``kind`` (missing | version | file_hash | file_missing | mismatched | broken | error),
        ``driver``, ``worker``, ``detail``.
    """

    __module__ = "rewardhub"

    def __init__(self, pool: str, driver_fingerprint: str, workers: Sequence[Mapping[str, Any]]) -> None:
        self.pool = pool
        self.driver_fingerprint = driver_fingerprint
        self.problems: list[dict[str, Any]] = []
        lines = []
        for w in workers:
            for p in w.get("problems") or ():
                full = {"pool": w.get("pool"), "node_id": w.get("node_id"), "ip": w.get("ip"),
                        "index": w.get("index"), **p}
                self.problems.append(full)
                lines.append(f"  {_where(w)}: {describe_problem(p)}")
        self.rewards = sorted({str(p["reward"]) for p in self.problems if p.get("reward")})
        shown = lines[:_MAX_LINES]
        if len(lines) > _MAX_LINES:
            shown.append(f"  ... and {len(lines) - _MAX_LINES} more")
        fix = ("install the same distributions on every node (see `rewardhub doctor` for a per-node report); "
               "a reward file is shipped to the workers, a module must be importable on every node")
        super().__init__(
            f"reward workers of pool {pool!r} do not match the driver's registry "
            f"(driver fingerprint {driver_fingerprint}):\n" + "\n".join(shown) + "\n" + fix)


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
