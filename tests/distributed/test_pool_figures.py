"""PoolFigures: the per-pool figures of ``--summary-json`` and the trainer's metrics."""

from __future__ import annotations

from rewardhub.distributed._figures import PoolFigures


def test_figures_track_workers_waits_and_redispatches():
    f = PoolFigures("reward", 3)
    assert f.as_dict()["queue_wait_p50_s"] is None
    assert "reward_workers/reward/queue_wait_p50_s" not in f.metrics()
    for alive in (3, 2, 1, 2):
        f.saw_workers(alive)
    for wait in [0.0] * 98 + [5.0, 9.0]:
        f.waited(wait)
    f.calls_redispatched, f.replaced = 4, 2
    d = f.as_dict()
    assert d["workers"] == {"min": 1, "max": 3, "now": 2}
    assert d["queue_wait_p50_s"] == 0.0 and d["queue_wait_p99_s"] == 9.0
    assert (d["calls_redispatched"], d["replicas_replaced"]) == (4, 2)
    m = f.metrics()
    assert m["reward_workers/reward/workers_min"] == 1.0
    assert m["reward_workers/reward/queue_wait_p99_s"] == 9.0
    assert m["reward_workers/reward/calls_redispatched"] == 4.0
