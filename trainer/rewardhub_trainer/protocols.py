"""What a schedule needs from the run's actors, as typed methods: the :class:`RolloutWorkerProtocol`
(generate), the :class:`LearnerProtocol` (the message queue and training), the
:class:`WeightSyncProtocol` (the rollouters' weights) and the :class:`ScorerProtocol` (the reward
clients). :class:`rewardhub_trainer.fleet.Fleet` implements them over Ray; a test implements them in
process, and runs a schedule without Ray.

A call that runs while the schedule goes on is a :data:`Call`: an opaque handle the protocol that sent it
answers for; :meth:`ActorsProtocol.wait` says which calls are in.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any
from typing import Protocol

from .rollouts import PromptBatch
from .rollouts import Rollout

__all__ = ["ActorsProtocol", "Call", "LearnerProtocol", "RolloutWorkerProtocol", "ScorerProtocol",
           "WeightSyncProtocol"]

#: a call in flight (over Ray: an ``ObjectRef``); hashable, answered by the protocol that sent it
Call = Any


class RolloutWorkerProtocol(Protocol):
    """The rollouters' generate calls (over Ray: :class:`rewardhub_trainer.faults.Rollouters`)."""

    deadline_s: float  #: a generate call unanswered this long is hung (0: no deadline)

    @property
    def gen(self) -> Mapping[Call, Any]:
        """The generate calls in flight."""
        ...

    @property
    def acks(self) -> Mapping[Call, Any]:
        """The weight loads in flight (each is waited for like a generate call)."""
        ...

    def submit(self, i: int, batch: PromptBatch) -> Call:
        """Called when rollouter ``i`` is idle and the schedule wants ``batch`` generated."""
        ...

    def done(self, call: Call) -> Rollout | None:
        """Called once a generate call is in: its rollout, or None when the batch was sent again (the
        rollouter died, or held other weights), as a new call in :attr:`gen`."""
        ...

    def acked(self, call: Call) -> None:
        """Called once a weight load in :attr:`acks` is in: checked (a failed one is sent again)."""
        ...

    def overdue(self) -> None:
        """Called after every wait: a rollouter whose generate call passed the deadline is restarted."""
        ...

    def busy(self) -> set[int]:
        """The rollouters with a generate call in flight (called before submitting more)."""
        ...

    def collect(self) -> list[Rollout]:
        """Called on a rewind or at the end: waits for every generate call; the rollouts that came back."""
        ...


class ScorerProtocol(Protocol):
    """The reward clients (over Ray: :class:`rewardhub_trainer.actors.RewardClient` actors)."""

    def score(self, rollout: Rollout) -> Rollout:
        """Called by the sync schedule: ``rollout`` scored on the first client (sent again when it dies)."""
        ...

    def score_clients(self) -> int:
        """How many clients score at once (each scores one batch at a time)."""
        ...

    def send_score(self, w: int, rollout: Rollout) -> Call:
        """Called when client ``w`` is free and a rollout waits to be scored."""
        ...

    def score_answer(self, w: int, call: Call, rollout: Rollout) -> tuple[Rollout | None, Call | None]:
        """Called once client ``w``'s score call is in: ``(scored, None)``, or ``(None, again)`` when the
        client died and ``rollout`` was sent again as call ``again``."""
        ...

    def hang_client(self, w: int, why: str) -> None:
        """Called when client ``w``'s call passed trainer.call_timeout_s: it is restarted as a dead one."""
        ...


class LearnerProtocol(Protocol):
    """The message queue and the learner (over Ray: :class:`rewardhub_trainer.actors.MessageQueue` and
    :class:`rewardhub_trainer.actors.Learner`)."""

    def put(self, rollout: Rollout) -> int:
        """Called with each scored rollout, in batch order; the number of batches queued."""
        ...

    def take(self, step: int) -> tuple[Rollout | None, list[dict[str, int]], int]:
        """Called when the learner is free, at learner step ``step``: ``(the next batch or None, the
        batches dropped as stale, the number still queued)``."""
        ...

    def drain(self) -> list[Rollout]:
        """Called on a rewind or at the end: everything queued."""
        ...

    def train(self, rollout: Rollout) -> Call:
        """Called with the batch the learner trains on next."""
        ...

    def learner_call(self, call: Call, what: str = "train failed") -> Any:
        """Called once the learner's call is in (or to wait for it): its answer; a learner that died is
        :class:`rewardhub_trainer.faults.LearnerLost`."""
        ...

    def hang_learner(self, why: str) -> None:
        """Called when a train call passed trainer.call_timeout_s: the learner is restarted as a dead one."""
        ...


class WeightSyncProtocol(Protocol):
    """The rollouters' weights (over Ray: the learner's ``get_weights`` sent to every rollouter)."""

    def sync_weights(self, step: int, *, wait: bool = False) -> None:
        """Called after a train step that the schedule syncs on: every rollouter gets the learner's weights
        (tagged ``step``); ``wait``: once every load is acknowledged."""
        ...

    def synced_step(self, default: int) -> int:
        """Called before submitting in fully_async: the step of the weights last sent (``default``: none)."""
        ...


class ActorsProtocol(ScorerProtocol, LearnerProtocol, WeightSyncProtocol, Protocol):
    """Everything a schedule calls (:class:`rewardhub_trainer.fleet.Fleet`)."""

    @property
    def rollouters(self) -> RolloutWorkerProtocol: ...

    def wait(self, calls: Sequence[Call], timeout: float | None) -> list[Call]:
        """The calls of ``calls`` that are in: at least one, unless ``timeout`` (seconds) passes first."""
        ...

    def settle(self, calls: Sequence[Call]) -> None:
        """Called on a rewind or at the end: waits for ``calls``, whatever their outcome."""
        ...
