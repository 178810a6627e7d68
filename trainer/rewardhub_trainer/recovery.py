"""Checkpoints and the learner's restart: what a run does when its learner dies.

:class:`Recovery` is a part of :class:`rewardhub_trainer.loop.Run` kept in its own module. The
checkpoint of step N is staged in a hidden folder and renamed into place once complete; the latest
one is where a restarted learner continues from. What the learner trained after it, and every
batch in flight, is thrown away and counted in ``samples_lost_on_restart``; the data order goes
back to the checkpoint's cursor, so the run trains the same batches an uninterrupted run would.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from .checkpoint import commit_checkpoint
from .checkpoint import staging_path
from .checkpoint import write_state
from .faults import ACTOR_ERRORS
from .faults import LearnerLost
from .faults import RunAborted
from .faults import cause
from .faults import hang
from .faults import wait_alive
from .runstate import RunState

__all__ = ["Recovery"]


class Recovery(RunState):
    """Checkpoint writing, and the learner's restart from the latest checkpoint (mixed into ``Run``)."""

    def _weights_ok(self) -> None:
        """After a failed acknowledgement: are the weights sent the fault (the learner died, or they are not
        finite)?"""
        import ray
        from ray.exceptions import RayTaskError

        if self.rollouters.weights is None:
            return
        try:
            ray.get(self.rollouters.weights[0], timeout=600)
        except ACTOR_ERRORS:
            raise LearnerLost from None
        except RayTaskError as exc:
            raise RunAborted(f"learner: weights not sent: {cause(exc)}") from None

    def _checkpoint(self) -> None:
        """Save atomically: the learner's files and the driver's state into a hidden folder, then renamed."""
        staged = staging_path(self.out / "checkpoints", self.step)
        self._learner_call(self.learner.save.remote(str(staged)), "checkpoint failed")
        # Only what was consumed is carried over: batches still in flight are regenerated on resume.
        totals = self._totals()
        carried = {k: totals[k] for k in ("trained", "dropped_stale", "lost_on_restart")}
        carried["generated"] = sum(carried.values())
        write_state(staged, {"step": self.step, "data_cursor": self.consumed, "counts": carried,
                             "max_staleness_seen": self.max_staleness, "config": self.prep.public_config()})
        path = commit_checkpoint(staged, self.step, keep=self.t.checkpoint_keep)
        self.restore_point = {"path": str(path), "step": self.step, "cursor": self.consumed,
                              "trained": totals["trained"]}
        self.last_checkpoint_t = time.monotonic()

    def _learner_call(self, ref: Any, what: str = "train failed") -> Any:
        """The learner's answer; a learner that died, or does not answer within trainer.call_timeout_s
        (hung: it is killed), is restored from the latest checkpoint (:class:`LearnerLost`)."""
        import ray
        from ray.exceptions import GetTimeoutError
        from ray.exceptions import RayTaskError

        try:
            return ray.get(ref, timeout=self.t.call_timeout_s or None)
        except GetTimeoutError:
            hang(self.learner, "learner", f"{what.split()[0]} not answered within {self.t.call_timeout_s:g}s")
            raise LearnerLost from None
        except ACTOR_ERRORS:
            raise LearnerLost from None
        except RayTaskError as exc:
            raise RunAborted(f"learner: {what}: {cause(exc)}") from None

    def _restart_learner(self) -> None:
        """The learner died: continue from the latest checkpoint; what came after it is lost (and counted)."""
        import ray

        self.learner_restarts += 1
        if self.learner_restarts > self.t.max_restarts:
            raise RunAborted(f"learner: died {self.learner_restarts} times (trainer.max_restarts="
                             f"{self.t.max_restarts}); see the Ray logs of its node for the cause")
        handle = self.learners.failed(0)
        point = self.restore_point
        wait_alive(handle, "learner")
        try:
            info = ray.get(handle.info.remote(), timeout=600)
            version = int(info["version"])
            if point["path"] and info.get("loaded_from") != point["path"]:
                version = int(ray.get(handle.load.remote(point["path"]), timeout=600))
        except ACTOR_ERRORS as exc:
            raise RunAborted(f"learner: could not be restarted: {cause(exc)}") from None
        lost = sum(r.num_samples for r in self._collect())
        undone = self._totals()["trained"] - int(point["trained"])
        self.counts["trained"] -= undone
        self.counts["lost_on_restart"] += lost + undone
        print(f"WARNING: learner restarted from step {point['step']} (was at {self.step}); "
              f"{lost + undone} samples lost", file=sys.stderr)
        self.learner_restores.append({"at_step": self.step, "to_step": int(point["step"]),
                                      "checkpoint": point["path"], "samples_lost": lost + undone})
        self.step = int(point["step"])
        self.cursor = self.consumed = int(point["cursor"])
        self._reset_flight()
        self.stats.rewind(self.step)
        self.versions = {k: v for k, v in self.versions.items() if k < self.step}
        self.versions[self.step] = version
        self.workers = self._infos()
        self._sync_weights(wait=True)  # the rollouters may hold weights newer than the checkpoint's
