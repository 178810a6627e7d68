"""Orchestration: ``sync`` (generate, score, train in lock-step) and ``fully_async`` (they overlap).

The driver owns the bookkeeping, so the accounting is exact: a sample is *generated* when its
rollout comes back from a rollouter, and then ends as *trained*, *dropped as stale* (by the message
queue, counted here), *unused at the end*, or *lost on restart* (the learner died: what it trained
after its latest checkpoint, and everything in flight, is thrown away and the run continues from
that checkpoint). A rollouter that dies mid-call is restarted by Ray (``max_restarts``) or
re-created, gets the current weights again, and the same batch is resubmitted: a lost call never
produced samples, so nothing is lost or counted twice (:mod:`rewardhub_trainer.faults`). A reward
worker that dies is restarted by its :class:`rewardhub.distributed.RewardWorkerPool`, which
re-scores only the samples that worker had not returned, so each sample is still scored once.

:class:`Run` is made of parts, each in its own module: :mod:`.lifecycle` (the actors' start-up,
weight sync and stop), :mod:`.modes` (the sync and fully-async loops), :mod:`.accounting` (counts,
step metrics, the summary) and :mod:`.recovery` (checkpoints, the learner's restart).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .accounting import COUNTS
from .accounting import Accounting
from .checkpoint import latest_checkpoint
from .checkpoint import read_state
from .lifecycle import Lifecycle
from .modes import Modes
from .prepare import Prepared
from .recovery import Recovery
from .reward_failures import FailureWatch
from .runfolder import begin
from .runfolder import check_output
from .runfolder import check_resume_model
from .runfolder import claim
from .stats import StepStats

__all__ = ["Run", "RunAborted"]

# Ray is imported here (not by config/prepare): this module is loaded only once the config is valid.
from .faults import LearnerLost  # noqa: E402
from .faults import RunAborted  # noqa: E402

StepCallback = Callable[[int, Mapping[str, Any], "Run"], None]


class Run(Lifecycle, Modes, Accounting, Recovery):
    """One training run; :meth:`run` returns the summary it also writes to ``summary.json``."""

    def __init__(self, prep: Prepared, output: str | os.PathLike[str], *, resume: str | None = None,
                 callbacks: tuple[StepCallback, ...] = (), overwrite: bool = False) -> None:
        """``output`` is checked (:func:`rewardhub_trainer.runfolder.check_output` and ``claim``): it may hold
        another run only with ``overwrite`` (whose files go once the actors have started) or when
        ``resume`` names it."""
        self.prep = prep
        self.cfg = prep.cfg
        self.t = prep.cfg.trainer
        self.out = check_output(str(output))
        claim(self.out, prep.public_config(), resume=resume, overwrite=overwrite)
        self.overwrite = overwrite
        self.resumed_here = bool(resume) and Path(os.path.abspath(str(resume))) == self.out
        self.callbacks = callbacks
        # : called with each evaluation's metrics (evaluate.py)
        self.val_callbacks: tuple[StepCallback, ...] = ()
        self.resume_ckpt = latest_checkpoint(Path(resume)) if resume else None
        if resume and self.resume_ckpt is None:
            from rewardhub.errors import UsageError

            raise UsageError(f"--resume: no checkpoint in {resume!r}\n"
                             "point it at the --output folder of an earlier run")
        if self.resume_ckpt is not None:
            check_resume_model(self.resume_ckpt, prep.model_path, str(resume))
        self.counts = dict.fromkeys(COUNTS, 0)
        self.prior = dict.fromkeys(COUNTS, 0)
        self.step = 0
        self.cursor = 0  # next batch index to generate
        self.consumed = 0  # next batch index the queue will hand out (trained or dropped)
        self.max_staleness = 0
        self.lost_calls = {"rollouter": 0, "reward_client": 0}
        self.resumed_from: int | None = None
        if self.resume_ckpt is not None:
            state = read_state(self.resume_ckpt)
            self.step = int(state["step"])
            self.cursor = self.consumed = int(state["data_cursor"])
            self.prior.update(state["counts"])
            self.max_staleness = int(state.get("max_staleness_seen", 0))
            self.resumed_from = self.step
        self.stats = StepStats(self.out, self.cfg.samples_per_step, resumed_from=self.resumed_from,
                               resume_dir=Path(resume) if resume else None,
                               num_rollouters=self.t.num_rollouters)
        # where a restarted learner continues from: the latest checkpoint of this run (or its start)
        self.restore_point = {"path": str(self.resume_ckpt) if self.resume_ckpt else None, "step": self.step,
                              "cursor": self.cursor, "trained": self.prior["trained"]}
        self.versions: dict[int, int] = {}  # weights tag (a step) -> policy version (optimizer updates)
        self.learner_restarts = 0
        self.learner_restores: list[dict[str, Any]] = []  # each restart: from which step, to which checkpoint
        self.weight_syncs = 0
        self.stale_in_row = self.max_stale_in_row = 0
        self.skipped_updates = 0
        self.reward_watch = FailureWatch(self.t.max_reward_error_rate)
        self.last_checkpoint_t = time.monotonic()
        self._reset_flight()
        self._queue_size = 0

    # -- the run -------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        try:
            return self._run()
        except BaseException:
            self._stop_actors()  # a run that stops (RunAborted, Ctrl-C) leaves no process behind
            raise

    def _run(self) -> dict[str, Any]:
        from .evaluate import Evaluator

        self.evaluator = Evaluator(self)  # data.val_files: evaluations before/every test_freq/at the end
        self._start_actors()
        begin(self.out, self.prep.public_config(), overwrite=self.overwrite, resumed_here=self.resumed_here)
        self.stats.start()
        self.evaluator.before_training()
        while self.step < self.t.total_steps:
            try:
                if self.t.mode == "sync":
                    self._run_sync()
                else:
                    self._run_async()
            except LearnerLost:
                self._recover()
        # the end: whatever is still in flight was generated (or will be) but not trained
        leftovers = self._collect()
        self.stats.finish()
        return self._finish(leftovers)

    def _recover(self) -> None:
        while True:  # it may die again while being restored: bounded by trainer.max_restarts
            try:
                self._restart_learner()
                return
            except LearnerLost:
                continue
