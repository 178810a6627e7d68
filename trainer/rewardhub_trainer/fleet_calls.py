"""The calls a schedule makes on the run's actors, over Ray: scoring on the reward clients, the message
queue, the learner's calls, and waiting for calls in flight (of
:class:`rewardhub_trainer.protocols.ActorsProtocol`, all but the rollouters and the weights, which
:class:`rewardhub_trainer.fleet.Fleet` adds).

A call sent to an actor that dies is sent again (a reward client's) or ends in :class:`LearnerLost`
(the learner's: the run restores it from its latest checkpoint); an actor that does not answer within
``trainer.call_timeout_s`` is killed, and handled as a dead one.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from .config import TrainerConfig
from .faults import ACTOR_ERRORS
from .faults import ActorGroup
from .faults import LearnerLost
from .faults import RunAborted
from .faults import cause
from .faults import hang
from .faults import wait_alive
from .rollouts import Rollout

__all__ = ["FleetCalls"]

from ray.exceptions import RayTaskError  # noqa: E402 - loaded only once the config is valid


class FleetCalls:
    """The reward clients', message queue's and learner's calls (the handles are :class:`Fleet`'s)."""

    t: TrainerConfig
    learners: ActorGroup
    reward_client: ActorGroup
    queue: Any  #: the message queue's Ray actor handle
    lost_calls: dict[str, int]

    @property
    def learner(self) -> Any:
        """Rank 0's handle (the others are its peers: :mod:`.ddp`)."""
        return self.learners.handles[0]

    def score(self, rollout: Rollout) -> Rollout:
        """Score a rollout on the first reward client, sent again when the client dies mid-call or does not
        answer within trainer.call_timeout_s (hung: killed and restarted). Its pool bounds each call of
        its workers itself (``reward.workers.call_timeout_s``)."""
        import ray
        from ray.exceptions import GetTimeoutError

        handle, deadline = self.reward_client.handles[0], self.t.call_timeout_s
        while True:
            try:
                scored: Rollout = ray.get(handle.score.remote(rollout), timeout=deadline or None)
                return self.scored(scored)
            except GetTimeoutError:
                hang(handle, "reward_client", f"score not answered within {deadline:g}s")
                handle = self.client_failed(0)
            except ACTOR_ERRORS:
                handle = self.client_failed(0)
            except RayTaskError as exc:  # e.g. a reward with on_failure: raise
                raise RunAborted(f"reward_client: score failed: {cause(exc)}") from None

    @staticmethod
    def scored(rollout: Rollout) -> Rollout:
        """A rollout back from a reward client: the lines its scoring left for the user are printed."""
        for line in rollout.reward_notes:
            print(f"WARNING: {line}", file=sys.stderr, flush=True)
        rollout.reward_notes = []
        return rollout

    def client_failed(self, i: int) -> Any:
        """Reward client ``i`` died mid-call: counted; its (restarted or re-created) live handle."""
        self.lost_calls["reward_client"] += 1
        handle = self.reward_client.failed(i)
        wait_alive(handle, "reward_client")
        return handle

    def learner_call(self, ref: Any, what: str = "train failed") -> Any:
        """The learner's answer; a learner that died, or does not answer within trainer.call_timeout_s
        (hung: it is killed), is restored from the latest checkpoint (:class:`LearnerLost`)."""
        import ray
        from ray.exceptions import GetTimeoutError

        try:
            return ray.get(ref, timeout=self.t.call_timeout_s or None)
        except GetTimeoutError:
            hang(self.learner, "learner", f"{what.split()[0]} not answered within {self.t.call_timeout_s:g}s")
            raise LearnerLost from None
        except ACTOR_ERRORS:
            raise LearnerLost from None
        except RayTaskError as exc:
            raise RunAborted(f"learner: {what}: {cause(exc)}") from None

    def train(self, rollout: Rollout) -> Any:
        return self.learner.train.remote(rollout)

    def hang_learner(self, why: str) -> None:
        hang(self.learner, "learner", why)

    def put(self, rollout: Rollout) -> int:
        import ray

        return int(ray.get(self.queue.put.remote(rollout)))

    def take(self, step: int) -> tuple[Rollout | None, list[dict[str, int]], int]:
        import ray

        item, dropped, queued = ray.get(self.queue.get.remote(step))
        return item, dropped, queued

    def drain(self) -> list[Rollout]:
        import ray

        out: list[Rollout] = ray.get(self.queue.drain.remote())
        return out

    def score_clients(self) -> int:
        return len(self.reward_client.handles)

    def send_score(self, w: int, rollout: Rollout) -> Any:
        return self.reward_client.handles[w].score.remote(rollout)

    def score_answer(self, w: int, call: Any, rollout: Rollout) -> tuple[Rollout | None, Any]:
        import ray

        try:
            return self.scored(ray.get(call)), None
        except ACTOR_ERRORS:  # the client died: the batch is sent again
            return None, self.client_failed(w).score.remote(rollout)
        except RayTaskError as exc:  # e.g. a reward with on_failure: raise
            raise RunAborted(f"reward_client: score failed: {cause(exc)}") from None

    def hang_client(self, w: int, why: str) -> None:
        hang(self.reward_client.handles[w], "reward_client", why)

    @staticmethod
    def wait(calls: Sequence[Any], timeout: float | None) -> list[Any]:
        import ray

        done, _ = ray.wait(list(calls), num_returns=1, timeout=timeout)
        return list(done)

    @staticmethod
    def settle(calls: Sequence[Any]) -> None:
        import ray

        for call in calls:
            try:
                ray.get(call)
            except Exception:  # noqa: BLE001 - waited for, whatever its outcome
                pass

    def save_learner(self, folder: str) -> None:
        """The learner writes its files (weights, optimizer) into ``folder``."""
        self.learner_call(self.learner.save.remote(folder), "checkpoint failed")

