"""The two modes: ``sync`` (generate, score, train in lock-step) and ``fully_async`` (they overlap).

:class:`Modes` is a part of :class:`rewardhub_trainer.loop.Run` kept in its own module (as
:mod:`.recovery` is). In ``fully_async`` the driver keeps every rollouter generating (within the
queue bound, the steps still needed and, with ``staleness_gate``, the staleness bound), scores what
comes back on the reward clients, puts scored batches into the message queue in batch order, and
hands the learner the next one as soon as it is free.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from .actors import PromptBatch
from .actors import Rollout
from .faults import ACTOR_ERRORS
from .faults import ActorGroup
from .faults import RunAborted
from .faults import cause
from .faults import hang
from .faults import wait_alive
from .runstate import RunState

__all__ = ["Modes"]

from ray.exceptions import RayTaskError  # noqa: E402 - loaded only once the config is valid


@dataclasses.dataclass
class _Flight:
    """What is between the rollouters and the learner (generate calls are in :class:`Rollouters`)."""

    next_put: int  #: the batch index the queue takes next
    score: dict[Any, tuple[int, Rollout]] = dataclasses.field(default_factory=dict)
    waiting: list[Rollout] = dataclasses.field(default_factory=list)  #: generated, waiting for a scorer
    ready: dict[int, Rollout] = dataclasses.field(default_factory=dict)  #: scored, waiting for its turn
    queued: int = 0
    train: tuple[Any, Rollout, int] | None = None  #: the learner's call, its batch and staleness
    train_t0: float = 0.0  #: when the learner's call was sent (trainer.call_timeout_s)


class Modes(RunState):
    """The sync and fully-async loops, and what is in flight between the actors (mixed into ``Run``)."""

    flight: _Flight

    def _arrives_fresh(self, training: bool, ahead: int) -> bool:
        """Would a batch started now be within the staleness bound when the learner reaches it?

        Batches are consumed in order, one step each, so it is trained at version
        ``step + training + ahead``; the rollouter generates with the last synced version.
        """
        weights = self.rollouters.weights
        version = weights[1] if weights is not None else self.resumed_from or 0
        return self.step + int(training) + ahead - version <= self.t.staleness_limit

    def _next_batch(self) -> PromptBatch:
        size = self.cfg.rollout.prompts_per_step
        pairs = self.prep.dataset.batch(self.cursor, size)
        batch = PromptBatch(index=self.cursor, prompts=[p for _, p in pairs],
                            dataset_indices=[i for i, _ in pairs])
        self.cursor += 1
        return batch

    def _call(self, pool: ActorGroup, i: int, method: str, arg: Any) -> Any:
        import ray

        while True:
            handle = pool.handles[i]
            try:
                return ray.get(getattr(handle, method).remote(arg))
            except ACTOR_ERRORS:
                self.lost_calls[pool.role] += 1
                wait_alive(pool.failed(i), pool.role)
            except RayTaskError as exc:  # e.g. a reward with on_failure: raise
                raise RunAborted(f"{pool.role}: {method} failed: {cause(exc)}") from None

    def _generate(self, batch: PromptBatch) -> Rollout:
        import ray

        roll = self.rollouters
        ref = roll.submit(0, batch)
        while True:
            ready, _ = ray.wait([ref], timeout=roll.deadline_s or None)
            if not ready:  # hung: killed (restarted by Ray), and the call fails as a dead one's does
                roll.overdue()
                ray.wait([ref])
            rollout = roll.done(ref)
            if rollout is not None:
                return rollout
            ref = next(iter(roll.gen))

    # -- sync ----------------------------------------------------------------------------------
    def _run_sync(self) -> None:
        import ray

        f = self.flight
        while self.step < self.t.total_steps:
            t0 = time.perf_counter()
            rollout = self._generate(self._next_batch())
            self._generated(rollout)
            f.waiting.append(rollout)
            rollout = self._call(self.reward_client, 0, "score", f.waiting.pop())
            ray.get(self.queue.put.remote(rollout))
            item, dropped, _ = ray.get(self.queue.get.remote(self.step))
            self._dropped(dropped)
            assert item is not None and not dropped, "sync mode never has stale samples"
            f.train = (None, item, 0)
            result = self._learner_call(self.learner.train.remote(item))
            f.train = None
            self.stats.busy("learner", result["train_s"])
            self.stats.busy("step", time.perf_counter() - t0)
            self._trained(item, self.step - item.version, result)
            if self.step < self.t.total_steps:
                self._sync_weights(wait=True)  # lock-step: the next batch uses the new policy

    # -- fully_async ---------------------------------------------------------------------------
    def _outstanding(self) -> int:
        f = self.flight
        return len(self.rollouters.gen) + len(f.score) + len(f.waiting) + len(f.ready) + f.queued

    def _submit_async(self) -> None:
        """Keep the rollouters busy, within the queue bound and the batches still needed; score what came."""
        t, f, roll = self.t, self.flight, self.rollouters
        idle_roll = [i for i in range(t.num_rollouters) if i not in roll.busy()]
        while idle_roll and self._outstanding() < t.queue_size and (
                self.step + (f.train is not None) + self._outstanding() < t.total_steps) and (
                not t.staleness_gate or self._arrives_fresh(f.train is not None, self._outstanding())):
            roll.submit(idle_roll.pop(), self._next_batch())
        # each reward client scores one batch at a time, spread over its pool's workers
        busy_rw = {w for w, _ in f.score.values()}
        for w in range(len(self.reward_client.handles)):
            if f.waiting and w not in busy_rw:
                item = f.waiting.pop(0)
                f.score[self.reward_client.handles[w].score.remote(item)] = (w, item)

    def _feed_learner(self) -> bool:
        """Move scored rollouts into the queue in batch order; hand the learner the next batch if it is free.

        True when the queue was asked for a batch (its drops may have freed room for more generation).
        """
        import ray

        f = self.flight
        while f.next_put in f.ready:
            f.queued = ray.get(self.queue.put.remote(f.ready.pop(f.next_put)))
            f.next_put += 1
        if f.train is not None or not f.queued:
            return False
        item, dropped, f.queued = ray.get(self.queue.get.remote(self.step))
        self._dropped(dropped)
        if item is not None:
            staleness = self.step - item.version
            assert staleness <= self.t.staleness_limit
            f.train = (self.learner.train.remote(item), item, staleness)
            f.train_t0 = time.monotonic()
        return True

    def _run_async(self) -> None:
        import ray

        f, roll = self.flight, self.rollouters
        while self.step < self.t.total_steps:
            self._submit_async()
            if self._feed_learner():
                continue
            self._queue_size = f.queued
            refs = list(roll.gen) + list(f.score) + ([f.train[0]] if f.train else []) + list(roll.acks)
            if not refs:
                raise RuntimeError("fully_async loop stalled with nothing in flight")
            done, _ = ray.wait(refs, num_returns=1, timeout=min(60.0, self.t.call_timeout_s or 60.0))
            self._overdue()
            for ref in done:
                if ref in roll.acks:
                    roll.acked(ref)
                elif ref in roll.gen:
                    rollout = roll.done(ref)
                    if rollout is not None:
                        self._generated(rollout)
                        f.waiting.append(rollout)
                elif ref in f.score:
                    self._scored(ref)
                else:
                    self._trained_async(ref)

    def _overdue(self) -> None:
        """Calls past trainer.call_timeout_s: their actor is hung, and is killed to be restarted as a dead
        one."""
        f, deadline = self.flight, self.t.call_timeout_s
        self.rollouters.overdue()
        if deadline and f.train is not None and f.train_t0 and time.monotonic() - f.train_t0 > deadline:
            f.train_t0 = 0.0  # killed once; its call then fails, and the learner is restored (LearnerLost)
            hang(self.learner, "learner", f"train not answered within {deadline:g}s")

    def _scored(self, ref: Any) -> None:
        import ray

        f = self.flight
        w, item = f.score.pop(ref)
        try:
            scored = ray.get(ref)
        except ACTOR_ERRORS:
            self.lost_calls["reward_client"] += 1
            handle = self.reward_client.failed(w)
            wait_alive(handle, "reward_client")
            f.score[handle.score.remote(item)] = (w, item)
            return
        except RayTaskError as exc:  # e.g. a reward with on_failure: raise
            raise RunAborted(f"reward_client: score failed: {cause(exc)}") from None
        f.ready[scored.batch.index] = scored

    def _trained_async(self, ref: Any) -> None:
        f, t = self.flight, self.t
        assert f.train is not None
        result = self._learner_call(ref)
        _, item, staleness = f.train
        f.train = None
        self.stats.busy("learner", result["train_s"])
        self._trained(item, staleness, result)
        weights = self.rollouters.weights
        synced = weights[1] if weights is not None else self.resumed_from or 0
        # sync every sync_interval steps, and whenever the rollouters' weights are so old
        # that everything they generate would be dropped (else the run could not progress)
        if self.step < t.total_steps and (self.step % t.sync_interval == 0
                                          or self.step - synced > t.staleness_limit):
            self._sync_weights()

    # -- the end -------------------------------------------------------------------------------
    def _collect(self) -> list[Rollout]:
        """Everything generated and not trained, once the calls in flight are in (counted as generated)."""
        import ray

        f = self.flight
        out = self.rollouters.collect()
        for rollout in out:
            self._generated(rollout)
        for ref, (_, item) in f.score.items():
            out.append(item)
            try:
                ray.get(ref)
            except Exception:  # noqa: BLE001 - its samples are counted either way
                pass
        out += f.waiting + list(f.ready.values())
        if f.train is not None:
            out.append(f.train[1])
            if f.train[0] is not None:
                try:
                    ray.get(f.train[0])
                except Exception:  # noqa: BLE001 - its samples are counted either way
                    pass
        out += ray.get(self.queue.drain.remote())
        self._reset_flight()
        return out

    def _reset_flight(self) -> None:
        self.flight = _Flight(next_put=self.cursor)
