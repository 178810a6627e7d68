"""What the parts of a run share: :class:`RunState`, the base of each part of
:class:`~rewardhub_trainer.loop.Run`.

``Run`` is made of parts kept in their own modules (:mod:`.lifecycle`, :mod:`.modes`,
:mod:`.accounting`, :mod:`.recovery`); each uses the run's state, set in ``Run.__init__`` or by
another part, and calls the other parts' methods. This class declares both once, for the type
checker: the attributes as annotations, the methods only while type checking (at run time each
method is the part's own, found through ``Run``'s bases as before).
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

from .actors import Rollout
from .config import TrainConfig
from .config import TrainerConfig
from .faults import ActorGroup
from .faults import Rollouters
from .placement import Placement
from .prepare import Prepared
from .reward_failures import FailureWatch
from .stats import StepStats

__all__ = ["RunState"]


class RunState:
    """The state a run's parts share (set by ``Run.__init__`` unless said otherwise)."""

    prep: Prepared
    cfg: TrainConfig
    t: TrainerConfig
    out: Path
    callbacks: tuple[Callable[..., None], ...]
    resume_ckpt: Path | None
    resumed_from: int | None
    #: the bookkeeping (:mod:`.accounting`): this run's counts, and those carried from a checkpoint
    counts: dict[str, int]
    prior: dict[str, int]
    step: int
    cursor: int  #: the next batch index to generate
    consumed: int  #: the next batch index the queue hands out (trained or dropped)
    max_staleness: int
    stale_in_row: int
    max_stale_in_row: int
    skipped_updates: int
    reward_watch: FailureWatch  #: failed reward calls, per reward (:mod:`.reward_failures`)
    lost_calls: dict[str, int]
    stats: StepStats
    restore_point: dict[str, Any]
    versions: dict[int, int]  #: weights tag (a step) -> policy version
    learner_restarts: int
    learner_restores: list[dict[str, Any]]
    weight_syncs: int
    last_checkpoint_t: float
    _queue_size: int
    #: set by :mod:`.modes` (``_reset_flight``)
    flight: Any
    #: set when the actors start (:mod:`.lifecycle`)
    placement: Placement
    rollouters: Rollouters
    learners: ActorGroup
    reward_client: ActorGroup
    queue: Any  #: the message queue's Ray actor handle
    cores_token: str | None  #: the run's core boards (:mod:`.cores`; None: threads are not lent)
    workers: list[dict[str, Any]]
    evaluator: Any  #: :class:`rewardhub_trainer.evaluate.Evaluator`, set by ``Run._run``

    if TYPE_CHECKING:  # the parts' methods that other parts call
        @property
        def learner(self) -> Any: ...  # .lifecycle
        def _threads(self) -> int: ...
        def _infos(self, clients: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]: ...
        def _check_fingerprints(self, infos: list[dict[str, Any]]) -> None: ...
        def _sync_weights(self, *, wait: bool = False) -> None: ...
        def _stop_actors(self) -> None: ...
        def _generated(self, rollout: Rollout) -> None: ...  # .accounting
        def _dropped(self, dropped: list[dict[str, int]]) -> None: ...
        def _trained(self, item: Rollout, staleness: int, result: Mapping[str, float]) -> None: ...
        def _totals(self) -> dict[str, int]: ...
        def _weights_ok(self) -> None: ...  # .recovery
        def _checkpoint(self) -> None: ...
        def _learner_call(self, ref: Any, what: str = "train failed") -> Any: ...
        def _call(self, pool: ActorGroup, i: int, method: str, arg: Any) -> Any: ...  # .modes
        def _collect(self) -> list[Rollout]: ...
        def _reset_flight(self) -> None: ...
