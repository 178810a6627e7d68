"""PoolFigures: what one reward worker pool reports of its run (``--summary-json``'s ``pools``, the
trainer's ``reward_workers/<pool>/...`` metrics): its workers (fewest, most, now), how long calls waited
for a free worker, calls sent again after their worker died, and workers replaced."""

from __future__ import annotations

from collections import deque
from typing import Any

__all__ = ["PoolFigures", "figure_metrics"]

#: the queue waits kept for the percentiles (the latest ones)
_WAITS_KEPT = 4096


class PoolFigures:
    """Counters of one pool; cheap enough to update on every call sent."""

    def __init__(self, pool: str, workers: int) -> None:
        self.pool = pool
        self.workers_min = self.workers_max = self.workers_now = workers
        self.calls_redispatched = 0
        self.replaced = 0
        self._waits: deque[float] = deque(maxlen=_WAITS_KEPT)

    def saw_workers(self, alive: int) -> None:
        """The pool has ``alive`` live workers now."""
        self.workers_now = alive
        self.workers_min = min(self.workers_min, alive)
        self.workers_max = max(self.workers_max, alive)

    def waited(self, seconds: float) -> None:
        """A call waited ``seconds`` between being queued and being sent to a worker."""
        self._waits.append(max(0.0, seconds))

    def wait_percentile(self, q: float) -> float | None:
        """The ``q`` quantile (0..1) of the kept queue waits, in seconds (None before any call)."""
        if not self._waits:
            return None
        ordered = sorted(self._waits)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    def as_dict(self) -> dict[str, Any]:
        """The figures as ``--summary-json`` writes them."""
        p50, p99 = self.wait_percentile(0.5), self.wait_percentile(0.99)
        return {"pool": self.pool,
                "workers": {"min": self.workers_min, "max": self.workers_max, "now": self.workers_now},
                "queue_wait_p50_s": None if p50 is None else round(p50, 6),
                "queue_wait_p99_s": None if p99 is None else round(p99, 6),
                "calls_redispatched": self.calls_redispatched, "replicas_replaced": self.replaced}

    def metrics(self) -> dict[str, float]:
        """The figures as the trainer's metrics (``reward_workers/<pool>/...``)."""
        return figure_metrics(self.as_dict())


def figure_metrics(figures: dict[str, Any]) -> dict[str, float]:
    """One pool's figures (:meth:`PoolFigures.as_dict`, a Scorer's ``pool_figures()`` item) as the
    trainer's metrics: ``reward_workers/<pool>/workers_min`` ... (a wait before any call: none)."""
    key = f"reward_workers/{figures['pool']}"
    out = {f"{key}/workers_{k}": float(v) for k, v in figures["workers"].items()}
    for name in ("calls_redispatched", "replicas_replaced", "queue_wait_p50_s", "queue_wait_p99_s"):
        if figures.get(name) is not None:
            out[f"{key}/{name}"] = float(figures[name])
    return out
