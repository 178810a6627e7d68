"""The fleet's start-up asks each actor for its info once (real Ray actors standing in for the run's)."""

from __future__ import annotations

import os
import signal
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
    fleet = Fleet(types.SimpleNamespace(cfg=types.SimpleNamespace(trainer=None), model_path="tiny-model"))
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


def _learner_class() -> type:
    """Answers a restore as a learner does: its info, and a checkpoint's load."""

    class Learner:
        def info(self) -> dict:
            import os

            return {"role": "learner", "version": 0, "loaded_from": None, "pid": os.getpid()}

        def load(self, path: str) -> int:
            return int(path.rsplit("_", 1)[-1])

        def train(self) -> None:
            import time

            time.sleep(600)  # in flight until its process is killed

    return Learner


@pytest.mark.timeout(240)
def test_the_learner_may_die_max_restarts_times_in_a_row_not_in_the_whole_run(session_ray):
    """Deaths count in a row, as a rollouter's: a checkpoint written after a restore (the next restore
    goes to a newer one) starts the count again; only a death that keeps coming back before the next
    checkpoint stops the run. (The learner could die only max_restarts times in the whole run.)"""
    from rewardhub_trainer.faults import ACTOR_ERRORS
    from rewardhub_trainer.faults import ActorGroup
    from rewardhub_trainer.ledger import RestorePoint

    ray = session_ray
    actor = ray.remote(_learner_class()).options(num_cpus=0, max_restarts=-1)
    trainer = types.SimpleNamespace(max_restarts=1)
    fleet = Fleet(types.SimpleNamespace(cfg=types.SimpleNamespace(trainer=trainer)))
    fleet.learners = ActorGroup("learner", lambda i: actor.remote(), 1, 1)
    start = RestorePoint(None, 0, 0, 0)
    points = [RestorePoint(f"/run/checkpoints/step_{s:06d}", s, s, 8 * s) for s in (2, 4, 6)]

    def die_and_restore(point: RestorePoint) -> int:
        pid = ray.get(fleet.learner.info.remote())["pid"]
        ref = fleet.learner.train.remote()  # its call in flight, as a run's train call
        os.kill(pid, signal.SIGKILL)  # Ray restarts it: a new process
        with pytest.raises(ACTOR_ERRORS):
            ray.get(ref, timeout=120)
        version = fleet.restore_learner(point)
        assert ray.get(fleet.learner.info.remote())["pid"] != pid
        return version

    assert die_and_restore(start) == 0  # before any checkpoint: the start's weights
    for point in points:  # a checkpoint between each death: 4 deaths in all, each the first in a row
        assert die_and_restore(point) == point.step
    assert fleet.learner_restarts == 4 and fleet.learner_in_row == 1
    # the same checkpoint again: the second death in a row stops the run, naming it
    with pytest.raises(RunAborted, match=r"^learner: died 2 times in a row, each restored to checkpoint "
                                         r"/run/checkpoints/step_000006 \(trainer.max_restarts=1\)"):
        die_and_restore(points[-1])
    for h in fleet.learners.handles:
        ray.kill(h)
