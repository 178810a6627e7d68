"""Autoscaling reward pools (``reward.workers.autoscale``) on a real local Ray with Ray Serve: the pool
grows under a burst and shrinks back to ``min_workers`` when idle, a replica that dies mid-call loses no
sample and scores none twice into the output, a replica that fails its registry proof is refused, and
bad ``autoscale`` keys are clear errors.

The burst is bounded by events, not sleeps: the reward holds every call until the test has seen Serve
run more than ``min_workers`` replicas (or its own deadline passes, and the test fails on the count).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path

import pytest

from rewardhub.config.schema import validate_reward
from rewardhub.errors import UsageError

REWARDS = '''
import os
import time


def held(*, response, extra_info=None, **kwargs):
    """Waits for the gate file (at most 120 s), logs its sample's index, returns the response's length;
    a sample marked ``die`` ends its replica's process once (the marker file says it did)."""
    info = extra_info or {}
    gate = info.get("gate")
    deadline = time.monotonic() + 120
    while gate and not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.02)
    die = info.get("die")
    if die and not os.path.exists(die):
        open(die, "w").close()
        os._exit(1)
    with open(info["log"], "a") as f:
        f.write(f"{info['i']}\\n")
    return float(len(response))
'''


def _cfg(path: Path, **scale: object) -> dict:
    return {"rewards": [{"path": str(path), "function": "held"}],
            "workers": {"num_workers": 1, "num_cpus": 0.25,
                        "autoscale": {"min_workers": 1, "max_workers": 3, "target_wait_s": 0.5, "idle_s": 1,
                                      **scale}}}


def _samples(n: int, log: Path, **extra: object) -> list[dict]:
    return [{"prompt": "p", "response": "x" * i, "extra_info": {"i": i, "log": str(log), **extra}}
            for i in range(n)]


def _until(check, timeout_s: float, what: str, step_s: float = 0.1):
    """Poll ``check`` until it is true (an event in another process), failing after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(step_s)
    raise AssertionError(f"timed out after {timeout_s:g}s waiting for {what}")


# ---- config ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("scale", "words"), [
    ({"min_workers": 4, "max_workers": 2}, ["min_workers=4 is above max_workers=2",
                                            "min_workers <= max_workers"]),
    ({"max_workers": 2, "idle": 3}, ["reward.workers.autoscale.idle", "did you mean", "idle_s",
                                     "target_wait_s"]),
    ({"min_workers": 1}, ["reward.workers.autoscale.max_workers is not set"]),
    ({"max_workers": 0}, ["reward.workers.autoscale.max_workers=0", ">= 1"]),
    ({"max_workers": 2, "min_workers": 0}, ["min_workers=0", ">= 1"]),
    ({"max_workers": 2, "target_wait_s": -1}, ["target_wait_s=-1", "> 0"]),
    ({"max_workers": 2, "idle_s": 0}, ["idle_s=0", "> 0"]),
    ({"max_workers": "many"}, ["max_workers='many'", "integer"]),
    ([1, 2], ["reward.workers.autoscale", "expected a mapping", "max_workers"]),
])
def test_bad_autoscale_keys_are_clear_errors(scale, words):
    with pytest.raises(UsageError) as info:
        validate_reward({"workers": {"num_workers": 1, "autoscale": scale}})
    for w in words:
        assert w in str(info.value)


def test_autoscale_keys_map_onto_serve():
    from rewardhub.distributed._autoscale import serve_autoscaling

    cfg = validate_reward({"workers": {"autoscale": {"min_workers": 2, "max_workers": 8, "target_wait_s": 2,
                                                     "idle_s": 45}}})
    got = serve_autoscaling(cfg.workers.autoscale, 2)
    assert (got["min_replicas"], got["initial_replicas"], got["max_replicas"]) == (2, 2, 8)
    assert (got["upscale_delay_s"], got["downscale_delay_s"]) == (2.0, 45.0)
    assert got["target_ongoing_requests"] == 2.0
    from ray.serve.config import AutoscalingConfig

    AutoscalingConfig(**got)  # Serve takes it as it is


# ---- on Ray Serve ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ray_serve(own_ray):
    ray = pytest.importorskip("ray")
    pytest.importorskip("ray.serve")
    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        from ray import serve

        serve.shutdown()
        ray.shutdown()


@pytest.fixture
def reward_file(tmp_path):
    path = tmp_path / "held.py"
    path.write_text(REWARDS)
    return path


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_pool_grows_under_a_burst_and_shrinks_to_min_when_idle(ray_serve, reward_file, tmp_path):
    from rewardhub.distributed import RewardWorkerPool

    log, gate = tmp_path / "scored.log", tmp_path / "gate"
    n = 24
    with RewardWorkerPool(_cfg(reward_file), chunk_size=1) as pool:
        group = pool.groups[0]
        assert group.replica_count() == 1
        out: dict = {}
        burst = _samples(n, log, gate=str(gate))
        run = threading.Thread(target=lambda: out.setdefault("res", pool.score(burst)))
        run.start()
        try:  # every call waits at the gate: the queue stays long until Serve adds replicas
            grown = _until(lambda: (c := group.replica_count()) > 1 and c, 120, "Serve to add a replica")
        finally:
            gate.touch()
            run.join(timeout=120)
        assert not run.is_alive()
        res = out["res"]
        assert grown > 1
        assert list(res.scores) == [float(i) for i in range(n)]  # one row per sample, its own
        assert sorted(int(x) for x in log.read_text().split()) == list(range(n))  # each scored once
        figures = pool.pool_figures()[0]
        assert figures["workers"]["max"] >= 2 and figures["workers"]["min"] == 1
        assert figures["queue_wait_p99_s"] is not None and figures["calls_redispatched"] == 0
        assert len(pool.workers_info()) >= 1
        # idle: back to min_workers (idle_s = 1), and the figures say so
        _until(lambda: group.replica_count() == 1, 120, "Serve to remove the idle replicas", 0.25)
        assert pool.pool_figures()[0]["workers"]["now"] == 1


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_replica_that_dies_mid_call_loses_no_sample(ray_serve, reward_file, tmp_path):
    from rewardhub.distributed import RewardWorkerPool

    log, marker = tmp_path / "scored.log", tmp_path / "died"
    n = 12
    samples = _samples(n, log)
    samples[5]["extra_info"]["die"] = str(marker)  # its replica's process ends under the call, once
    with RewardWorkerPool(_cfg(reward_file, max_workers=2), chunk_size=3) as pool:
        res = pool.score(samples)
        assert marker.exists()
        assert list(res.scores) == [float(i) for i in range(n)]
        scored = [int(x) for x in log.read_text().split()]
        assert set(scored) == set(range(n))
        figures = pool.pool_figures()[0]
        assert figures["calls_redispatched"] >= 1 and figures["replicas_replaced"] >= 1
        # the replaced replica scores the next batch (Serve brought the pool back)
        again = pool.score(_samples(4, tmp_path / "again.log"))
        assert list(again.scores) == [0.0, 1.0, 2.0, 3.0]


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_replica_that_fails_its_registry_proof_is_refused(ray_serve, reward_file):
    from rewardhub.distributed import RegistryMismatchError
    from rewardhub.distributed import RewardWorkerPool
    from rewardhub.distributed import prepare_setup

    cfg = _cfg(reward_file)
    setup, _ = prepare_setup(cfg)
    # the driver's registry as a worker will not have it: another sha256 of the reward's file
    tampered = dataclasses.replace(setup, driver_items={k: "0" * 64 for k in setup.driver_items})
    with pytest.raises(RegistryMismatchError) as info:
        RewardWorkerPool(cfg, reference=tampered)
    assert "held" in str(info.value) and "pool 'reward'" in str(info.value)
    from ray import serve

    assert not [a for a in serve.status().applications if a.startswith("rewardhub-")]  # nothing left behind


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_executor_ray_terms_score_on_the_autoscaling_pool(ray_serve, reward_file, tmp_path):
    """``executor: ray`` terms of a plain Runner (what ``rewardhub score`` runs) get the same pool."""
    from ray import serve

    from rewardhub.distributed import runner_from_config

    cfg = _cfg(reward_file)
    cfg["rewards"][0]["executor"] = "ray"
    log = tmp_path / "scored.log"
    with runner_from_config(cfg) as runner:
        res = runner.score(_samples(6, log))
        apps = [a for a in serve.status().applications if a.startswith("rewardhub-reward-")]
        assert len(apps) == 1  # the Serve application of the pool
    assert list(res.scores) == [float(i) for i in range(6)]
    assert sorted(int(x) for x in log.read_text().split()) == list(range(6))


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_min_workers_the_cluster_cannot_place_is_a_bounded_error(ray_serve, reward_file):
    """3 replicas of 2 CPUs on a 4-CPU Ray: Serve never runs them all; the pool says so within its start
    timeout, and leaves no application behind."""
    from ray import serve

    from rewardhub.distributed import RewardWorkerPool
    from rewardhub.distributed import WorkerFailedError

    cfg = _cfg(reward_file, min_workers=3, max_workers=3)
    cfg["workers"]["num_cpus"] = 2
    with pytest.raises(WorkerFailedError) as info:
        RewardWorkerPool(cfg, start_timeout_s=15)
    assert "did not start 3 replicas within 15s" in str(info.value) and "'CPU': 2.0" in str(info.value)
    _until(lambda: not [a for a in serve.status().applications if a.startswith("rewardhub-")], 60,
           "the pool's application to go")


def test_the_reward_model_pool_autoscales_by_its_own_key():
    from rewardhub.distributed._placement import split_reward_models

    both = validate_reward({"workers": {"autoscale": {"max_workers": 4}},
                            "reward_model": {"enable": True, "autoscale": {"max_workers": 2, "idle_s": 5}}})
    rm_cfg, _, opts = split_reward_models(both, [])
    assert rm_cfg.workers.autoscale == both.reward_model.autoscale == opts["autoscale"]
    assert rm_cfg.workers.autoscale.max_workers == 2
    only_workers = validate_reward({"workers": {"autoscale": {"max_workers": 4}},
                                    "reward_model": {"enable": True}})
    assert split_reward_models(only_workers, [])[0].workers.autoscale is None  # not carried over
    with pytest.raises(UsageError, match=r"reward_model.autoscale: min_workers=3 is above max_workers=2"):
        validate_reward({"reward_model": {"autoscale": {"min_workers": 3, "max_workers": 2}}})
