"""The two schedules: ``sync`` (generate, score, train in lock-step) and ``fully_async`` (they overlap).

A schedule is the run's part that decides what runs when, and owns what is in flight between the
actors (:class:`Flight`; generate calls are in :class:`rewardhub_trainer.faults.Rollouters`). It
reads the :class:`~rewardhub_trainer.ledger.Ledger` and reports what comes back to the run's
:class:`Outcomes`, which does the bookkeeping. In ``fully_async`` the driver keeps every rollouter
generating (within the queue bound, the steps still needed and, with ``staleness_gate``, the
staleness bound), scores what comes back on the reward clients, puts scored batches into the message
queue in batch order, and hands the learner the next one as soon as it is free.

It calls the actors only through :class:`rewardhub_trainer.protocols.ActorsProtocol` (the run's
:class:`rewardhub_trainer.fleet.Fleet` over Ray; in-process fakes in the tests): it imports no Ray.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import Any
from typing import Protocol

from .config import TrainerConfig
from .data import PromptDataset
from .ledger import Ledger
from .protocols import ActorsProtocol
from .rollouts import PromptBatch
from .rollouts import Rollout
from .stats import StepStats

__all__ = ["AsyncSchedule", "Flight", "Outcomes", "Schedule", "SyncSchedule", "make_schedule"]


class Outcomes(Protocol):
    """What a schedule reports (the run's bookkeeping: :class:`rewardhub_trainer.loop.Run`)."""

    def generated(self, rollout: Rollout) -> None: ...

    def dropped(self, dropped: list[dict[str, int]]) -> None: ...

    def trained(self, item: Rollout, staleness: int, result: Mapping[str, float], *, queued: int) -> None: ...


@dataclasses.dataclass
class Flight:
    """What is between the rollouters and the learner."""

    next_put: int  #: the batch index the queue takes next
    score: dict[Any, tuple[int, Rollout]] = dataclasses.field(default_factory=dict)
    score_t0: dict[Any, float] = dataclasses.field(default_factory=dict)  #: when each score call was sent
    waiting: list[Rollout] = dataclasses.field(default_factory=list)  #: generated, waiting for a scorer
    ready: dict[int, Rollout] = dataclasses.field(default_factory=dict)  #: scored, waiting for its turn
    queued: int = 0
    train: tuple[Any, Rollout, int] | None = None  #: the learner's call, its batch and staleness
    train_t0: float = 0.0  #: when the learner's call was sent (trainer.call_timeout_s)


class Schedule:
    """Runs steps until ``trainer.total_steps`` (:meth:`run`); :meth:`collect` empties what is in flight."""

    def __init__(self, t: TrainerConfig, prompts_per_step: int, dataset: PromptDataset, fleet: ActorsProtocol,
                 ledger: Ledger, stats: StepStats, outcomes: Outcomes) -> None:
        self.t, self.prompts_per_step, self.dataset = t, prompts_per_step, dataset
        self.fleet, self.ledger, self.stats, self.outcomes = fleet, ledger, stats, outcomes
        self.flight = Flight(next_put=ledger.cursor)

    def run(self) -> None:
        raise NotImplementedError

    def _next_batch(self) -> PromptBatch:
        index = self.ledger.next_batch()
        pairs = self.dataset.batch(index, self.prompts_per_step)
        return PromptBatch(index=index, prompts=[p for _, p in pairs], dataset_indices=[i for i, _ in pairs])

    def collect(self) -> list[Rollout]:
        """Everything generated and not trained, once the calls in flight are in (reported as generated);
        the flight starts again from the ledger's cursor."""
        f, fleet = self.flight, self.fleet
        out = fleet.rollouters.collect()
        for rollout in out:
            self.outcomes.generated(rollout)
        out += [item for _, item in f.score.values()]
        fleet.settle(list(f.score))  # their samples are counted either way
        out += f.waiting + list(f.ready.values())
        if f.train is not None:
            out.append(f.train[1])
            if f.train[0] is not None:
                fleet.settle([f.train[0]])
        out += fleet.drain()
        self.reset()
        return out

    def reset(self) -> None:
        """Nothing in flight; the queue takes the ledger's cursor next (after :meth:`collect`, a rewind)."""
        self.flight = Flight(next_put=self.ledger.cursor)


class SyncSchedule(Schedule):
    """Generate, score, train, send the weights: one batch at a time, every batch on the newest policy."""

    def _generate(self, batch: PromptBatch) -> Rollout:
        fleet, roll = self.fleet, self.fleet.rollouters
        ref = roll.submit(0, batch)
        while True:
            if not fleet.wait([ref], roll.deadline_s or None):  # hung: killed (restarted), and the call
                roll.overdue()  # fails as a dead one's does
                fleet.wait([ref], None)
            rollout = roll.done(ref)
            if rollout is not None:
                return rollout
            ref = next(iter(roll.gen))

    def run(self) -> None:
        f, fleet, ledger = self.flight, self.fleet, self.ledger
        while ledger.step < self.t.total_steps:
            t0 = time.perf_counter()
            rollout = self._generate(self._next_batch())
            self.outcomes.generated(rollout)
            f.waiting.append(rollout)
            rollout = fleet.score(f.waiting.pop())
            fleet.put(rollout)
            item, dropped, _ = fleet.take(ledger.step)
            self.outcomes.dropped(dropped)
            assert item is not None and not dropped, "sync mode never has stale samples"
            f.train = (None, item, 0)
            result = fleet.learner_call(fleet.train(item))
            f.train = None
            self.stats.busy("learner", result["train_s"])
            self.stats.busy("step", time.perf_counter() - t0)
            self.outcomes.trained(item, ledger.step - item.version, result, queued=0)
            if ledger.step < self.t.total_steps:
                fleet.sync_weights(ledger.step, wait=True)  # lock-step: the next batch uses the new policy


class AsyncSchedule(Schedule):
    """Generation, scoring and training overlap, within the queue and staleness bounds."""

    def _synced(self) -> int:
        return self.fleet.synced_step(self.ledger.resumed_from or 0)

    def _arrives_fresh(self, training: bool, ahead: int) -> bool:
        """Would a batch started now be within the staleness bound when the learner reaches it?

        Batches are consumed in order, one step each, so it is trained at version
        ``step + training + ahead``; the rollouter generates with the last synced version.
        """
        return self.ledger.step + int(training) + ahead - self._synced() <= self.t.staleness_limit

    def _outstanding(self) -> int:
        f = self.flight
        return len(self.fleet.rollouters.gen) + len(f.score) + len(f.waiting) + len(f.ready) + f.queued

    def _submit(self) -> None:
        """Keep the rollouters busy, within the queue bound and the batches still needed; score what came."""
        t, f, roll, step = self.t, self.flight, self.fleet.rollouters, self.ledger.step
        idle_roll = [i for i in range(t.num_rollouters) if i not in roll.busy()]
        while idle_roll and self._outstanding() < t.queue_size and (
                step + (f.train is not None) + self._outstanding() < t.total_steps) and (
                not t.staleness_gate or self._arrives_fresh(f.train is not None, self._outstanding())):
            roll.submit(idle_roll.pop(), self._next_batch())
        # each reward client scores one batch at a time, spread over its pool's workers
        busy_rw = {w for w, _ in f.score.values()}
        for w in range(self.fleet.score_clients()):
            if f.waiting and w not in busy_rw:
                item = f.waiting.pop(0)
                ref = self.fleet.send_score(w, item)
                f.score[ref], f.score_t0[ref] = (w, item), time.monotonic()

    def _feed_learner(self) -> bool:
        """Move scored rollouts into the queue in batch order; hand the learner the next batch if it is free.

        True when the queue was asked for a batch (its drops may have freed room for more generation).
        """
        f, fleet = self.flight, self.fleet
        while f.next_put in f.ready:
            f.queued = fleet.put(f.ready.pop(f.next_put))
            f.next_put += 1
        if f.train is not None or not f.queued:
            return False
        item, dropped, f.queued = fleet.take(self.ledger.step)
        self.outcomes.dropped(dropped)
        if item is not None:
            staleness = self.ledger.step - item.version
            assert staleness <= self.t.staleness_limit
            f.train = (fleet.train(item), item, staleness)
            f.train_t0 = time.monotonic()
        return True

    def run(self) -> None:
        roll = self.fleet.rollouters
        while self.ledger.step < self.t.total_steps:
            self._submit()
            if self._feed_learner():
                continue
            f = self.flight
            refs = list(roll.gen) + list(f.score) + ([f.train[0]] if f.train else []) + list(roll.acks)
            if not refs:
                raise RuntimeError("fully_async loop stalled with nothing in flight")
            done = self.fleet.wait(refs, min(60.0, self.t.call_timeout_s or 60.0))
            self._overdue()
            for ref in done:
                if ref in roll.acks:
                    roll.acked(ref)
                elif ref in roll.gen:
                    rollout = roll.done(ref)
                    if rollout is not None:
                        self.outcomes.generated(rollout)
                        f.waiting.append(rollout)
                elif ref in f.score:
                    self._scored(ref)
                else:
                    self._trained(ref)

    def _overdue(self) -> None:
        """Calls past trainer.call_timeout_s: their actor is hung, and is killed to be restarted as a dead
        one."""
        f, deadline = self.flight, self.t.call_timeout_s
        self.fleet.rollouters.overdue()
        if deadline and f.train is not None and f.train_t0 and time.monotonic() - f.train_t0 > deadline:
            f.train_t0 = 0.0  # killed once; its call then fails, and the learner is restored (LearnerLost)
            self.fleet.hang_learner(f"train not answered within {deadline:g}s")
        for ref, t0 in list(f.score_t0.items()):  # a reward client that does not answer: as the learner
            if deadline and time.monotonic() - t0 > deadline:
                del f.score_t0[ref]
                self.fleet.hang_client(f.score[ref][0], f"score not answered within {deadline:g}s")

    def _scored(self, ref: Any) -> None:
        f = self.flight
        w, item = f.score.pop(ref)
        f.score_t0.pop(ref, None)
        scored, again = self.fleet.score_answer(w, ref, item)
        if scored is None:  # its reward client died: the batch was sent again
            f.score[again], f.score_t0[again] = (w, item), time.monotonic()
            return
        f.ready[scored.batch.index] = scored

    def _trained(self, ref: Any) -> None:
        f, t, fleet, ledger = self.flight, self.t, self.fleet, self.ledger
        assert f.train is not None
        result = fleet.learner_call(ref)
        _, item, staleness = f.train
        f.train = None
        self.stats.busy("learner", result["train_s"])
        self.outcomes.trained(item, staleness, result, queued=f.queued)
        # sync every sync_interval steps, and whenever the rollouters' weights are so old
        # that everything they generate would be dropped (else the run could not progress)
        step = ledger.step
        if step < t.total_steps and (step % t.sync_interval == 0
                                     or step - self._synced() > t.staleness_limit):
            fleet.sync_weights(step)


def make_schedule(t: TrainerConfig, prompts_per_step: int, dataset: PromptDataset, fleet: ActorsProtocol,
                  ledger: Ledger, stats: StepStats, outcomes: Outcomes) -> Schedule:
    """The schedule ``trainer.mode`` names."""
    cls = SyncSchedule if t.mode == "sync" else AsyncSchedule
    return cls(t, prompts_per_step, dataset, fleet, ledger, stats, outcomes)
