"""The fleet's start-up asks each actor for its info once (real Ray actors standing in for the run's)."""

from __future__ import annotations

import types

import pytest

from rewardhub_trainer.faults import RunAborted
from rewardhub_trainer.fleet import Fleet


def _actor_class() -> type:
    """Counts its ``info()`` calls; answers like a learner, rollouter or reward client (defined here, so
    that Ray ships it by value: the workers cannot import a test module)."""

    class Actor:
        def __init__(self, info: dict) -> None:
            self._info, self.calls = info, 0

        def info(self) -> dict:
            self.calls += 1
            return dict(self._info)

        def ranks(self) -> list:
            return []

        def workers(self) -> list:
            return [{"role": "reward_worker", "pid": 1}]

        def count(self) -> int:
            return self.calls

    return Actor


def _fleet(ray, client_info: dict) -> tuple[Fleet, list]:
    actor = ray.remote(_actor_class()).options(num_cpus=0)
    learner = actor.remote({"role": "learner", "version": 3})
    rollouters = [actor.remote({"role": "rollouter"}) for _ in range(2)]
    clients = [actor.remote(client_info) for _ in range(2)]
    fleet = Fleet(types.SimpleNamespace(cfg=types.SimpleNamespace(trainer=None)))
    fleet.learners = types.SimpleNamespace(handles=[learner])
    fleet.rollouters = types.SimpleNamespace(pool=types.SimpleNamespace(handles=rollouters))
    fleet.reward_client = types.SimpleNamespace(handles=clients)
    return fleet, [learner, *rollouters, *clients]


def test_start_up_asks_each_actor_for_its_info_once(session_ray):
    ray = session_ray
    fleet, handles = _fleet(ray, {"role": "reward_client", "registry_fingerprint": "f"})
    assert fleet._first_infos() == 3  # the learner's policy version
    assert ray.get([h.count.remote() for h in handles]) == [1] * len(handles)
    assert [w["role"] for w in fleet.workers] == ["learner", "rollouter", "rollouter", "reward_client",
                                                "reward_client", "reward_worker", "reward_worker"]
    for h in handles:
        ray.kill(h)


def test_a_reward_client_that_could_not_start_stops_the_run_before_the_others_are_asked(session_ray):
    ray = session_ray
    fleet, handles = _fleet(
        ray,
        {"role": "reward_client", "error": "registry differs", "hostname": "h", "node": "n" * 20, "pid": 7},
    )
    with pytest.raises(RunAborted, match="reward_client on h .*pid 7.*: registry differs"):
        fleet._first_infos()
    # the learner and the rollouters were not asked; each reward client once
    assert ray.get([h.count.remote() for h in handles]) == [0, 0, 0, 1, 1]
    for h in handles:
        ray.kill(h)
