"""The reward worker as a Ray Serve replica: what an autoscaling pool (:mod:`._autoscale`) runs.

Each replica is a :class:`RewardWorker` that proved its registry in its constructor. One that fails the
proof raises there, so Serve never routes a call to it; its ``hello()`` is left in Ray's key-value store
(under :func:`refusal_prefix`) for the driver to report, as a fixed pool reports a refused worker.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from ._reward_worker import RewardWorker
from ._setup import WorkerSetup

__all__ = ["RewardReplica", "refusal_prefix"]

_KV_NAMESPACE = "rewardhub"


def refusal_prefix(app: str) -> str:
    """The key prefix under which the replicas of Serve application ``app`` leave a refused start-up."""
    return f"refused/{app}/"


class RewardReplica:
    """A Serve replica scoring chunks with its own :class:`RewardWorker`, one chunk at a time (as a
    fixed pool's actor does); the calls Serve queues behind it are what the autoscaler sees."""

    def __init__(self, setup: WorkerSetup, app: str) -> None:
        from concurrent.futures import ThreadPoolExecutor

        try:
            from ray import serve

            tag = str(serve.get_replica_context().replica_id.unique_id)
        except Exception:  # noqa: BLE001 - outside Serve (a direct test)
            tag = "local"
        self.worker = RewardWorker(setup, index=-1)
        self.tag = tag
        if self.worker.problems:
            from ray.experimental import internal_kv

            from ._errors import RegistryMismatchError

            info = self.hello()
            internal_kv._internal_kv_put(refusal_prefix(app) + tag, json.dumps(info, default=str),
                                         namespace=_KV_NAMESPACE)
            raise RegistryMismatchError(setup.pool, setup.driver_fingerprint, [info])
        # the scoring thread: one chunk at a time, off Serve's event loop (a reward may run its own loop)
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rewardhub-replica")
        self._introduced = False

    def hello(self) -> dict[str, Any]:
        """The worker's hello() (:meth:`RewardWorker.hello`), with the replica's id."""
        return {**self.worker.hello(), "replica": self.tag}

    async def score(self, samples: Sequence[Any], indices: Sequence[int] | None = None,
                    terms: Sequence[str] | None = None) -> dict[str, Any]:
        """:meth:`RewardWorker.score`, with when the call started here (``start``: time.time()) and
        this replica's id."""
        import asyncio

        loop = asyncio.get_running_loop()

        def run() -> dict[str, Any]:
            start = time.time()
            out = {**self.worker.score(samples, indices, terms), "start": start, "replica": self.tag}
            if not self._introduced:  # the driver learns each replica's facts from its first answer
                self._introduced = True
                out["hello"] = self.hello()
            return out

        return await loop.run_in_executor(self._thread, run)

    def __del__(self) -> None:
        worker = getattr(self, "worker", None)
        if worker is not None:
            worker.close()


def read_refusals(app: str) -> list[dict[str, Any]]:
    """The hello() of every replica of ``app`` that refused to start, as the replicas left them."""
    from ray.experimental import internal_kv

    out = []
    for key in internal_kv._internal_kv_list(refusal_prefix(app), namespace=_KV_NAMESPACE):
        raw = internal_kv._internal_kv_get(key, namespace=_KV_NAMESPACE)
        if raw:
            out.append(json.loads(raw))
    return out


def clear_refusals(app: str) -> None:
    from ray.experimental import internal_kv

    internal_kv._internal_kv_del(refusal_prefix(app), del_by_prefix=True, namespace=_KV_NAMESPACE)
