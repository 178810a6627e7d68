"""The reward cache of a whole pool: one store that every reward worker, on every node, reads and writes.

A :class:`~rewardhub.distributed.RewardWorkerPool` whose terms have ``cache`` on starts one small actor,
:class:`CacheStore`, on the node of the process that opened the pool (the driver, the trainer's reward
client): it owns the cache file there (``DIR/scores.sqlite`` of ``cache_dir``:
:class:`~rewardhub.execution.Disk`) or, without one, keeps the scores in memory for the pool's life. Each
worker keeps its own in-memory cache in front of it, asks the store once per chunk for the keys it
misses, and hands it once per chunk what its calls gave (never a failure:
:class:`~rewardhub.execution._cache.CachePlan`). So a call made on one node is a hit on every other, and
with a folder it survives the run. The key rules are the cache's own.

A store that cannot be reached (its node gone, Ray shutting down) costs no score: the worker says so once
and goes on with its own in-memory cache only.
"""

from __future__ import annotations

import hashlib
import os
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

__all__ = ["CacheStore", "FleetStore", "start_store", "store_name"]

#: scores a store without a folder keeps (the least recently used go first)
MEMORY_ENTRIES = 1_000_000
#: seconds one get or put may take before the worker goes on without the store
_CALL_TIMEOUT_S = 60.0


class CacheStore:
    """The actor: the pool's cache entries (JSON text, as the cache file holds them), on disk or in
    memory."""

    def __init__(self, folder: str | None) -> None:
        from ..execution import Disk

        self.disk = Disk(folder) if folder else None
        self.memory: OrderedDict[str, str] = OrderedDict()
        self.gets = self.puts = self.hits = 0

    def get(self, keys: Sequence[str]) -> dict[str, Any]:
        """The entries of ``keys`` that hold a score (others: misses)."""
        from ..execution import stored_entry

        self.gets += len(keys)
        if self.disk is not None:
            found = self.disk.get(keys)
        else:
            found = {}
            for k in keys:
                raw = self.memory.get(k)
                entry = None if raw is None else stored_entry(raw)
                if entry is not None:
                    self.memory.move_to_end(k)
                    found[k] = entry
        self.hits += len(found)
        return found

    def put(self, rows: Sequence[tuple[str, str]]) -> int:
        """Keep ``rows`` (key, entry as JSON text); :returns: how many."""
        self.puts += len(rows)
        if self.disk is not None:
            self.disk.put(rows)
        else:
            for key, raw in rows:
                self.memory[key] = raw
                self.memory.move_to_end(key)
            while len(self.memory) > MEMORY_ENTRIES:
                self.memory.popitem(last=False)
        return len(rows)

    def info(self) -> dict[str, Any]:
        from ._ray import process_location

        return {**process_location(), "path": self.disk.path if self.disk is not None else None,
                "gets": self.gets, "hits": self.hits, "puts": self.puts}


def store_name(folder: str | None) -> str:
    """The store's actor name: one per cache folder (two pools of one run naming it share it), else one
    in memory for each pool (stopped with it)."""
    if not folder:
        import uuid

        return f"rewardhub-cache-memory-{uuid.uuid4().hex[:16]}"
    return f"rewardhub-cache-{hashlib.sha256(os.path.abspath(folder).encode()).hexdigest()[:24]}"


def start_store(ray: Any, name: str, folder: str | None) -> Any:
    """Start (or find, when a pool of this run started it) the store ``name`` of ``folder`` on this
    process's node; it lives as long as the job, or the pool that stops it. :returns: its actor handle."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    node = ray.get_runtime_context().get_node_id()
    return ray.remote(CacheStore).options(
        name=name, get_if_exists=True, num_cpus=0, max_restarts=0,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
    ).remote(folder)


class FleetStore:
    """A reward worker's view of the pool's :class:`CacheStore`, shaped as the cache file
    (:class:`~rewardhub.execution._cachedisk.Disk`: ``get`` and ``put``), so the worker's
    :class:`~rewardhub.execution._cache.RewardCache` uses it in the file's place."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.broken = False
        self._actor: Any = None

    def _call(self, method: str, arg: Any) -> Any:
        if self.broken:
            return None
        import ray

        try:
            if self._actor is None:
                self._actor = ray.get_actor(self.name)
            return ray.get(getattr(self._actor, method).remote(arg), timeout=_CALL_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - gone, never started, timed out: scores go on
            self.broken = True
            import logging

            line = (f"the pool's reward cache ({self.name}) cannot be reached ({type(exc).__name__}); this "
                    "worker scores on with its own in-memory cache only")
            logging.getLogger("rewardhub.distributed").warning("%s", line)
            return None

    def get(self, keys: Sequence[str]) -> dict[str, Any]:
        found = self._call("get", list(keys))
        return dict(found) if found else {}

    def put(self, rows: Sequence[tuple[str, str]]) -> None:
        if rows:
            self._call("put", [(k, v) for k, v in rows])
