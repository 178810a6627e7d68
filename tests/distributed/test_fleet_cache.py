"""The reward cache of a pool is the fleet's: a call made by a worker on node A is a hit for a worker on
node B (two pools, one per node, naming one cache folder), and the folder's file holds it after the run.
A failure is never stored; a store that cannot be reached costs no score."""

from __future__ import annotations

import math
import sqlite3

import pytest

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.ray

REWARD = '''
import os


def counted(*, response, log_dir, **kwargs):
    """Scores ``r<i>`` as i, each call logged with its node; ``bad<i>`` fails."""
    import ray

    with open(os.path.join(log_dir, "calls"), "a") as f:
        f.write(f"{ray.get_runtime_context().get_node_id()} {response}\\n")
    if response.startswith("bad"):
        raise ValueError("no score for " + response)
    return float(response[1:])
'''


@pytest.fixture(scope="module")
def two_nodes(own_ray):
    from ray.cluster_utils import Cluster
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    a = c.add_node(num_cpus=1, resources={"node_a": 1})
    b = c.add_node(num_cpus=1, resources={"node_b": 1})
    c.wait_for_nodes()
    ray.init(address=c.address, log_to_driver=False)
    try:
        yield c, a.node_id, b.node_id
    finally:
        ray.shutdown()
        c.shutdown()


def _cfg(tmp_path, node: str, cache: bool = True) -> dict:
    reward = tmp_path / "counted.py"
    reward.write_text(REWARD)
    return {"rewards": [{"path": str(reward), "function": "counted", "cache": cache,
                         "kwargs": {"log_dir": str(tmp_path)}}],
            "workers": {"num_workers": 1, "num_cpus": 1, "resources": {node: 1}}}


def _calls(tmp_path) -> list[tuple[str, str]]:
    path = tmp_path / "calls"
    return [tuple(line.split()) for line in path.read_text().splitlines()] if path.exists() else []


def _values(res) -> list[float | None]:
    return [r["counted"] for r in res.rewards]


SAMPLES = [{"prompt": "q", "response": f"r{i}"} for i in range(10)] + \
          [{"prompt": "q", "response": f"bad{i}"} for i in range(2)]


def _check(values) -> None:
    assert values[:10] == [float(i) for i in range(10)]
    assert all(math.isnan(v) for v in values[10:])


@pytest.mark.timeout(400)
def test_a_call_made_on_node_a_is_a_hit_on_node_b_and_kept_on_disk(two_nodes, tmp_path):
    from rewardhub.distributed import RewardWorkerPool

    _, node_a, node_b = two_nodes
    cache = tmp_path / "cache"
    with RewardWorkerPool(_cfg(tmp_path, "node_a"), cache_dir=str(cache)) as pool_a:
        _check(_values(pool_a.score(SAMPLES)))
    assert sorted(_calls(tmp_path)) == sorted((node_a, s["response"]) for s in SAMPLES)
    with RewardWorkerPool(_cfg(tmp_path, "node_b"), cache_dir=str(cache)) as pool_b:
        res = pool_b.score(SAMPLES)
        assert {w["node_id"] for w in pool_b.workers_info()} == {node_b}
    _check(_values(res))
    on_b = [r for n, r in _calls(tmp_path) if n == node_b]
    assert sorted(on_b) == ["bad0", "bad1"]  # every score a hit; the failures were never stored
    assert res.metrics["rewards/counted/cache_hits"] == 10
    with sqlite3.connect(cache / "scores.sqlite") as db:  # the file holds them after the run
        rows = db.execute("SELECT entry FROM scores").fetchall()
    assert sorted(float(r[0].split(",")[0].strip("[")) for r in rows) == [float(i) for i in range(10)]


@pytest.mark.timeout(300)
def test_a_store_that_cannot_be_reached_costs_no_score(two_nodes, tmp_path):
    from rewardhub.distributed import RewardWorkerPool

    with RewardWorkerPool(_cfg(tmp_path, "node_a"), cache_dir=str(tmp_path / "gone")) as pool:
        [group] = pool.groups
        ray.kill(group.cache_store, no_restart=True)
        _check(_values(pool.score(SAMPLES)))
        _check(_values(pool.score(SAMPLES)))  # the worker's own memory still serves the second batch
    assert len(_calls(tmp_path)) == len(SAMPLES) + 2  # failures called again, scores once


@pytest.mark.timeout(400)
def test_cached_equals_uncached_on_the_fleet(two_nodes, tmp_path):
    from hypothesis import given
    from hypothesis import settings
    from hypothesis import strategies as st

    from rewardhub.distributed import RewardWorkerPool

    responses = st.one_of(st.integers(0, 30).map(lambda i: f"r{i}"),
                          st.integers(0, 3).map(lambda i: f"bad{i}"))

    with RewardWorkerPool(_cfg(tmp_path, "node_a"), cache_dir=str(tmp_path / "c")) as cached, \
            RewardWorkerPool(_cfg(tmp_path, "node_b", cache=False)) as plain:

        @settings(max_examples=6, deadline=None, derandomize=True, database=None)
        @given(st.lists(responses, min_size=1, max_size=12))
        def same(rs):
            samples = [{"prompt": "q", "response": r} for r in rs]
            want, got = _values(plain.score(samples)), _values(cached.score(samples))
            assert [None if math.isnan(v) else v for v in got] == [None if math.isnan(v) else v for v in want]

        same()
