"""A reward worker pool's slots: one per worker, its actor (restarted in place), and how the pool
picks the slot for the next chunk."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["WorkerSlot", "pick_slot", "slot_facts"]


@dataclass
class WorkerSlot:
    index: int
    actor: Any = None
    generation: int = 0
    inflight: int = 0
    alive: bool = False
    starting: Any = None  #: the pending hello() of a (re)started actor
    starting_since: float = 0.0  #: when that actor was asked for (time.monotonic())
    info: dict[str, Any] | None = None
    restarts: int = 0
    gone: bool = False  #: out of restarts


def pick_slot(slots: Sequence[WorkerSlot], dispatch: str, max_inflight: int,
              next_rr: int) -> tuple[WorkerSlot | None, int]:
    """The slot for the next chunk (``least_loaded``: the fewest in flight; ``round_robin``: the next
    free one from ``next_rr``), or None when every live slot has ``max_inflight`` chunks; and the
    round robin's next start."""
    free = [s for s in slots if s.alive and s.inflight < max_inflight]
    if not free:
        return None, next_rr
    if dispatch == "least_loaded":
        return min(free, key=lambda s: (s.inflight, s.index)), next_rr
    n = len(slots)
    for k in range(n):
        s = slots[(next_rr + k) % n]
        if s in free:
            return s, (s.index + 1) % n
    return None, next_rr


def slot_facts(slot: WorkerSlot, pool: str) -> dict[str, Any]:
    """What ``workers_info()`` says of one worker (from its hello())."""
    i = slot.info or {}
    return {"role": "reward_worker", "pool": pool, "index": slot.index, "node": i.get("node_id"),
            "node_id": i.get("node_id"), "ip": i.get("ip"), "hostname": i.get("hostname"),
            "pid": i.get("pid"), "registry_fingerprint": i.get("fingerprint"), "restarts": slot.restarts,
            "alive": slot.alive, "start_s": i.get("start_s"), "files": i.get("files") or {},
            "rewards": i.get("rewards") or {}, "cuda_visible": i.get("cuda_visible")}
