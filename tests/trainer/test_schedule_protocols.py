"""The schedules run against in-process actors that implement :mod:`rewardhub_trainer.protocols` (no Ray):
the real :class:`~rewardhub_trainer.ledger.Ledger` and :class:`~rewardhub_trainer.actors.MessageQueue` keep
the accounts, the rollouters, reward clients and learner answer each call at once."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

import pytest

from rewardhub_trainer.actors import MessageQueue
from rewardhub_trainer.config import TrainerConfig
from rewardhub_trainer.data import Prompt
from rewardhub_trainer.data import PromptDataset
from rewardhub_trainer.ledger import Ledger
from rewardhub_trainer.protocols import ActorsProtocol
from rewardhub_trainer.rollouts import PromptBatch
from rewardhub_trainer.rollouts import Rollout
from rewardhub_trainer.schedule import AsyncSchedule
from rewardhub_trainer.schedule import SyncSchedule
from rewardhub_trainer.schedule import make_schedule
from rewardhub_trainer.stats import StepStats

N, PROMPTS = 2, 2  #: responses per prompt, prompts per step
SAMPLES = N * PROMPTS


class Call:
    """A call in flight (each one distinct, as Ray's object refs are)."""


class Rollouters:
    """In-process rollouters: a generate call is answered with the weights the rollouter was last sent."""

    deadline_s = 0.0

    def __init__(self, size: int) -> None:
        self.gen: dict[Call, tuple[int, PromptBatch, int]] = {}
        self.acks: dict[Call, int] = {}
        self.tags = [0] * size  #: the weights each rollouter holds (0: the base ones)

    def submit(self, i: int, batch: PromptBatch) -> Call:
        call = Call()
        self.gen[call] = (i, batch, self.tags[i])
        return call

    def done(self, call: Call) -> Rollout | None:
        _, batch, tag = self.gen.pop(call)
        return Rollout(batch=batch, version=tag, groups=[[f"{p.question}/{k}" for k in range(N)]
                                                         for p in batch.prompts], gen_s=0.0, rollouter_pid=0)

    def acked(self, call: Call) -> None:
        self.acks.pop(call)

    def overdue(self) -> None:
        pass

    def busy(self) -> set[int]:
        return {i for i, _, _ in self.gen.values()}

    def collect(self) -> list[Rollout]:
        out = [r for r in map(self.done, list(self.gen)) if r is not None]
        self.acks.clear()
        return out


class Actors:
    """In-process :class:`ActorsProtocol`: every call is in as soon as it is sent."""

    def __init__(self, t: TrainerConfig) -> None:
        self.rollouters = Rollouters(t.num_rollouters)
        self.queue = MessageQueue(t.queue_size, t.staleness_limit if t.mode == "fully_async" else 0)
        self.trains: dict[Call, Rollout] = {}
        self.scores: dict[Call, Rollout] = {}
        self.version = 0
        self.syncs: list[int] = []  #: the step of each weight sync

    @staticmethod
    def _scored(rollout: Rollout) -> Rollout:
        rollout.rewards = [[1.0] * len(g) for g in rollout.groups]
        return rollout

    def score(self, rollout: Rollout) -> Rollout:
        return self._scored(rollout)

    def score_clients(self) -> int:
        return 2

    def send_score(self, w: int, rollout: Rollout) -> Call:
        call = Call()
        self.scores[call] = rollout
        return call

    def score_answer(self, w: int, call: Call, rollout: Rollout) -> tuple[Rollout | None, Call | None]:
        return self._scored(self.scores.pop(call)), None

    def hang_client(self, w: int, why: str) -> None:
        raise AssertionError(why)

    def put(self, rollout: Rollout) -> int:
        return self.queue.put(rollout)

    def take(self, step: int) -> tuple[Rollout | None, list[dict[str, int]], int]:
        return self.queue.get(step)

    def drain(self) -> list[Rollout]:
        return self.queue.drain()

    def train(self, rollout: Rollout) -> Call:
        call = Call()
        self.trains[call] = rollout
        return call

    def learner_call(self, call: Call, what: str = "train failed") -> Any:
        self.trains.pop(call)
        self.version += 1
        return {"train_s": 0.0, "version": self.version}

    def hang_learner(self, why: str) -> None:
        raise AssertionError(why)

    def sync_weights(self, step: int, *, wait: bool = False) -> None:
        self.syncs.append(step)
        for i in range(len(self.rollouters.tags)):
            self.rollouters.tags[i] = step
            self.rollouters.acks[Call()] = i

    def synced_step(self, default: int) -> int:
        return self.syncs[-1] if self.syncs else default

    def wait(self, calls: Sequence[Call], timeout: float | None) -> list[Call]:
        return list(calls[:1])  # the first one sent is in first

    def settle(self, calls: Sequence[Call]) -> None:
        pass


class Outcomes:
    """The run's bookkeeping, on the real ledger (as :class:`rewardhub_trainer.loop.Run` does)."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.trained_at: list[tuple[int, int]] = []  #: (batch index, staleness) of each trained batch
        self.drops: list[dict[str, int]] = []

    def generated(self, rollout: Rollout) -> None:
        self.ledger.generated(rollout.num_samples)

    def dropped(self, dropped: list[dict[str, int]]) -> None:
        for d in dropped:
            self.ledger.dropped(d["batch_index"], d["samples"])
        self.drops += dropped

    def trained(self, item: Rollout, staleness: int, result: Mapping[str, float], *, queued: int) -> None:
        assert item.rewards is not None, "trained before it was scored"
        self.ledger.trained(item.batch.index, item.num_samples, staleness, version=int(result["version"]),
                            skipped=0)
        self.trained_at.append((item.batch.index, staleness))


def _run(tmp_path: Any, **trainer: Any) -> tuple[Any, Actors, Ledger, Outcomes, list[Rollout]]:
    t = TrainerConfig(call_timeout_s=0.0, max_stale_batches=100, **trainer)
    actors, ledger = Actors(t), Ledger()
    ledger.started(0)
    outcomes = Outcomes(ledger)
    dataset = PromptDataset([Prompt(question=f"q{i}", ground_truth=i, data_source="d") for i in range(5)])
    fleet: ActorsProtocol = actors  # the fakes are what a schedule takes (mypy checks them against it)
    schedule = make_schedule(t, PROMPTS, dataset, fleet, ledger,
                             StepStats(tmp_path, SAMPLES, resumed_from=None, resume_dir=None), outcomes)
    schedule.run()
    left = schedule.collect()
    return schedule, actors, ledger, outcomes, left


def test_a_schedule_imports_no_ray():
    code = "import sys, rewardhub_trainer.schedule; assert 'ray' not in sys.modules, 'ray imported'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_sync_schedule_trains_every_batch_on_the_newest_weights(tmp_path):
    schedule, actors, ledger, outcomes, left = _run(tmp_path, mode="sync", total_steps=4)
    assert isinstance(schedule, SyncSchedule)
    assert ledger.step == 4 and ledger.cursor == ledger.consumed == 4 and left == []
    assert ledger.totals() == {"generated": 4 * SAMPLES, "trained": 4 * SAMPLES, "dropped_stale": 0,
                               "lost_on_restart": 0}
    assert outcomes.trained_at == [(0, 0), (1, 0), (2, 0), (3, 0)]
    assert actors.syncs == [1, 2, 3]  # after every step but the last
    assert ledger.versions == {0: 0, 1: 1, 2: 2, 3: 3, 4: 4}


@pytest.mark.parametrize("gate", [False, True])
def test_async_schedule_drops_stale_batches_and_every_sample_is_accounted_for(tmp_path, gate):
    schedule, actors, ledger, outcomes, left = _run(
        tmp_path, mode="fully_async", total_steps=4, num_rollouters=2, queue_size=4, staleness_limit=0,
        sync_interval=1, staleness_gate=gate)
    assert isinstance(schedule, AsyncSchedule)
    totals = ledger.totals()
    assert ledger.step == 4 and totals["trained"] == 4 * SAMPLES
    # every sample generated is trained, dropped as stale, or still in flight at the end
    in_flight = sum(r.num_samples for r in left)
    assert totals["generated"] == totals["trained"] + totals["dropped_stale"] + in_flight
    assert all(staleness == 0 for _, staleness in outcomes.trained_at)  # staleness_limit 0
    assert [i for i, _ in outcomes.trained_at] == sorted(i for i, _ in outcomes.trained_at)  # batch order
    assert all(d["staleness"] > 0 for d in outcomes.drops)
    assert totals["dropped_stale"] == sum(d["samples"] for d in outcomes.drops)
    if gate:  # a batch is only started when it will be fresh when trained: none is dropped
        assert outcomes.drops == [] and totals["generated"] == 4 * SAMPLES
    else:  # batches generated on the base weights while the learner moved on are dropped
        # queue_size 4: batches 0-3 start on the base weights; 0 is trained and the weights synced, so
        # 1-3 are one step stale; then the two rollouters start two batches at a time, the first trained
        # and the second dropped, until the learner's 4th step (the last batch needs no partner)
        assert [i for i, _ in outcomes.trained_at] == [0, 4, 7, 9]
        assert [d["batch_index"] for d in outcomes.drops] == [1, 2, 3, 5, 6, 8]
        assert totals["dropped_stale"] == 6 * SAMPLES and totals["generated"] == 10 * SAMPLES and left == []
        assert ledger.consumed == ledger.cursor == 10
