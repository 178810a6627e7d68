"""Orchestration: one training run, composed of parts that each own their state.

- :class:`~rewardhub_trainer.ledger.Ledger`: the step, the data cursor and what became of every sample
  (plain numbers, no Ray);
- :class:`~rewardhub_trainer.fleet.Fleet`: the actors (start, calls that survive a dead actor, weight
  sync, the learner's restore, stop);
- :class:`~rewardhub_trainer.checkpoint.Checkpointer`: when to save, and the latest checkpoint;
- :class:`~rewardhub_trainer.schedule.Schedule`: ``sync`` or ``fully_async``, and what is in flight;
- :class:`~rewardhub_trainer.evaluate.Evaluator`: evaluations on ``data.val_files``.

:class:`Run` wires them and is the schedule's :class:`~rewardhub_trainer.schedule.Outcomes`: it records
what comes back in the ledger and the step metrics, checks the run's health (stale batches, failing
rewards, non-finite updates), saves checkpoints, and when the learner dies continues from the latest
checkpoint: what it trained after it, and every batch in flight, is thrown away and counted
(``samples_lost_on_restart``); the data order goes back to the checkpoint's cursor, so the run trains
the same batches an uninterrupted run would.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rewardhub.execution import RoutingWatch
from rewardhub.execution import config_routes

from .actors import Rollout
from .checkpoint import Checkpointer
from .checkpoint import latest_checkpoint
from .checkpoint import read_state
from .devices import devices_summary
from .ledger import Ledger
from .prepare import Prepared
from .reward_failures import FailureWatch
from .reward_failures import invalid_samples
from .rewards import provenance
from .runfolder import RunFolder
from .runfolder import begin
from .runfolder import check_resume_model
from .runfolder import check_resume_rewards
from .runfolder import claim
from .stats import StepStats

__all__ = ["Run", "RunAborted"]

# Ray is imported here (not by config/prepare): this module is loaded only once the config is valid.
from .evaluate import Evaluator  # noqa: E402
from .faults import LearnerLost  # noqa: E402
from .faults import RunAborted  # noqa: E402
from .fleet import Fleet  # noqa: E402
from .fleet import check_infos  # noqa: E402
from .schedule import make_schedule  # noqa: E402

StepCallback = Callable[[int, Mapping[str, Any], "Run"], None]


class Run:
    """One training run; :meth:`run` returns the summary it also writes to ``summary.json``."""

    def __init__(self, prep: Prepared, output: str | os.PathLike[str], *, resume: str | None = None,
                 callbacks: tuple[StepCallback, ...] = (), overwrite: bool = False,
                 allow_reward_change: bool = False, allow_config_change: bool = False,
                 folder: RunFolder | None = None) -> None:
        """``output`` is checked (:class:`rewardhub_trainer.runfolder.RunFolder` and ``claim``): it may hold
        another run only with ``overwrite`` (whose files go once the actors have started) or when
        ``resume`` names it. ``folder``: ``output`` chosen and locked already (by the command)."""
        self.prep = prep
        self.t = prep.cfg.trainer
        #: the folder is this run's until it ends (or this fails)
        self.lock = folder if folder is not None else RunFolder(str(output))
        self.out = self.lock.path
        try:
            self._check(prep, resume, overwrite, allow_reward_change, allow_config_change)
            self._parts(prep, resume, overwrite, callbacks)
        except BaseException:
            self.lock.release(discard=True)
            raise

    def _parts(self, prep: Prepared, resume: str | None, overwrite: bool,
               callbacks: tuple[StepCallback, ...]) -> None:
        """The run's parts: ledger, stats, checkpoints, fleet, evaluator, schedule (nothing starts)."""
        t = self.t
        self.overwrite = overwrite
        self.resumed_here = bool(resume) and Path(os.path.abspath(str(resume))) == self.out
        #: called after each step, and with each evaluation's metrics (trackers: loggers.py)
        self.callbacks = callbacks
        self.val_callbacks: tuple[StepCallback, ...] = ()
        #: called once, when the actors are up (the command's progress bar starts then)
        self.start_callbacks: tuple[Callable[[Run], None], ...] = ()
        self.ledger = Ledger(read_state(self.resume_ckpt) if self.resume_ckpt is not None else None)
        self.stats = StepStats(self.out, prep.cfg.samples_per_step, resumed_from=self.ledger.resumed_from,
                               resume_dir=Path(resume) if resume else None, num_rollouters=t.num_rollouters)
        self.checkpoints = Checkpointer(self.out, t, self.ledger.point(
            str(self.resume_ckpt) if self.resume_ckpt else None))
        self.reward_watch = FailureWatch(t.max_reward_error_rate)  #: failed reward calls, per reward
        #: one WARNING per reward that applied to none of the samples scored so far (routed elsewhere)
        self.routing = RoutingWatch(config_routes(prep.cfg.reward))
        #: each restart of the learner: from which step, to which checkpoint
        self.learner_restores: list[dict[str, Any]] = []
        self.fleet = Fleet(prep)
        self.evaluator = Evaluator(prep, self.fleet, self.stats, self._report_evaluation)
        self.schedule = make_schedule(t, prep.cfg.rollout.prompts_per_step, prep.dataset, self.fleet,
                                      self.ledger, self.stats, self)

    def _check(self, prep: Prepared, resume: str | None, overwrite: bool, allow_reward_change: bool,
               allow_config_change: bool = False) -> None:
        """The folder and the checkpoint to resume (:mod:`.runfolder`), before anything starts."""
        claim(self.out, prep.public_config(), resume=resume, overwrite=overwrite,
              allow_config_change=allow_config_change)
        self.resume_ckpt = latest_checkpoint(Path(resume)) if resume else None
        if resume and self.resume_ckpt is None:
            from rewardhub.errors import UsageError

            raise UsageError(f"--resume: no checkpoint in {resume!r}\n"
                             "point it at the --output folder of an earlier run")
        if self.resume_ckpt is not None:
            check_resume_model(self.resume_ckpt, prep.model_path, str(resume))
            check_resume_rewards(self.resume_ckpt, prep.reward_identities(), str(resume),
                                 allow=allow_reward_change)

    # -- the run -------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        try:
            return self._run()
        except BaseException:
            self._stop(hurry=True)  # a run that stops (RunAborted, Ctrl-C) leaves no process behind
            raise
        finally:
            self.lock.release()

    def _run(self) -> dict[str, Any]:
        ledger = self.ledger
        ledger.started(self.fleet.start(str(self.resume_ckpt) if self.resume_ckpt else None))
        if ledger.step > 0:  # resumed: the rollouters start from the checkpoint's weights
            self.fleet.sync_weights(ledger.step, wait=True)
        for started in self.start_callbacks:
            started(self)
        begin(self.out, self.prep.public_config(), overwrite=self.overwrite, resumed_here=self.resumed_here,
              rewards=self.prep.reward_identities())
        self.stats.start()
        self.evaluator.before_training(ledger.step)
        while ledger.step < self.t.total_steps:
            try:
                self.schedule.run()
            except LearnerLost:
                self._recover()
        # the end: whatever is still in flight was generated (or will be) but not trained
        leftovers = self.schedule.collect()
        self.stats.finish()
        return self._finish(leftovers)

    def _stop(self, *, hurry: bool = False) -> None:
        self.evaluator.close()
        self.fleet.stop(hurry=hurry)

    def _infos(self) -> list[dict[str, Any]]:
        """Every actor's info (the evaluator's once it has started), checked."""
        infos = self.fleet.infos() + self.evaluator.infos()
        check_infos(infos)
        return infos

    # -- what the schedule reports (Outcomes) ---------------------------------------------------
    def generated(self, rollout: Rollout) -> None:
        self.ledger.generated(rollout.num_samples)
        self.stats.busy("rollouter", rollout.gen_s)

    def dropped(self, dropped: list[dict[str, int]]) -> None:
        t = self.t
        for d in dropped:
            in_row = self.ledger.dropped(d["batch_index"], d["samples"])
            self.stats.dropped(d, in_row)
            if in_row == (t.max_stale_batches + 1) // 2:
                print(f"WARNING: dropped {in_row} batch(es) in a row as stale "
                      f"(the run stops at {t.max_stale_batches})", file=sys.stderr)
            if in_row >= t.max_stale_batches:
                raise RunAborted(
                    f"message queue: dropped {in_row} batch(es) in a row as stale (trainer."
                    f"staleness_limit={t.staleness_limit}); raise trainer.staleness_limit or "
                    "trainer.max_stale_batches, or lower trainer.sync_interval")

    def trained(self, item: Rollout, staleness: int, result: Mapping[str, float], *, queued: int) -> None:
        ledger, t = self.ledger, self.t
        stale_before = ledger.trained(item.batch.index, item.num_samples, staleness,
                                      version=int(result["version"]),
                                      skipped=int(result.get("optim/skipped_steps", 0)))
        step = ledger.step
        invalid = invalid_samples(item.rewards)
        extra = {
            "policy_version": ledger.versions.get(item.version, item.version),
            "weights_step": item.version,
            "stale/batches_in_a_row": stale_before,
            "samples/invalid": invalid,
        }
        metrics = self.stats.step(step, item, staleness, result, ledger.totals(), queue_size=queued,
                                  extra=extra)
        failing = self.reward_watch.step(item.reward_failures, invalid)
        self.routing.see_counts({name: (item.num_samples, applied)
                                 for name, (_, applied, _) in item.reward_failures.items()})
        if failing:
            raise RunAborted(failing)
        if int(result.get("optim/nonfinite_in_row", 0)) >= t.max_nonfinite_steps:
            raise RunAborted(
                f"learner: {int(result['optim/nonfinite_in_row'])} optimizer updates in a row skipped "
                f"(non-finite loss or gradient, step {step}); lower trainer.lr or check the rewards")
        if self.checkpoints.due(step):
            self.checkpoints.save(ledger, self.fleet.save_learner, self.prep.public_config(),
                                  self.prep.reward_identities())
        for cb in self.callbacks:
            cb(step, metrics, self)
        self.evaluator.after_step(step)

    def _report_evaluation(self, step: int, metrics: dict[str, Any]) -> None:
        for cb in self.val_callbacks:
            cb(step, metrics, self)

    # -- the learner died ------------------------------------------------------------------------
    def _recover(self) -> None:
        while True:  # it may die again while being restored: bounded by trainer.max_restarts
            with contextlib.suppress(LearnerLost):
                self._restore()
                return

    def _restore(self) -> None:
        """Continue from the latest checkpoint; what came after it is lost (and counted)."""
        point, at_step = self.checkpoints.restore_point, self.ledger.step
        version = self.fleet.restore_learner(point)
        in_flight = sum(r.num_samples for r in self.schedule.collect())
        lost = self.ledger.rewind(point, in_flight, version)
        print(f"WARNING: learner restarted from step {point.step} (was at {at_step}); "
              f"{lost} samples lost", file=sys.stderr)
        self.learner_restores.append({"at_step": at_step, "to_step": point.step, "checkpoint": point.path,
                                      "samples_lost": lost})
        self.schedule.reset()
        self.stats.rewind(point.step)
        self.fleet.workers = self._infos()
        # the rollouters may hold weights newer than the checkpoint's
        self.fleet.sync_weights(point.step, wait=True)

    # -- the end ---------------------------------------------------------------------------------
    def _finish(self, leftovers: list[Rollout]) -> dict[str, Any]:
        summary = self._summary(leftovers, self._infos())
        from rewardhub.builtin.judging.calibrate import (
            FIGURES,  # the judges' calibration gates, where a term has one
        )

        if FIGURES:
            summary["calibration"] = list(FIGURES.values())
        self._stop()
        failed = self.reward_watch.every_call_failed()
        if failed:  # no summary.json: the run did not train (as a run the stop rule ends)
            raise RunAborted(failed)
        (self.out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
        return summary

    def _summary(self, leftovers: list[Rollout], workers: list[dict[str, Any]]) -> dict[str, Any]:
        t, ledger, fleet, prep = self.t, self.ledger, self.fleet, self.prep
        unused = sum(r.num_samples for r in leftovers)
        totals = ledger.totals()
        counters = fleet.counters()
        fully_async = t.mode == "fully_async"
        kept = ("pool", "rank", "gpu_ids", "cuda_visible", "device", "dtype", "registry_builds")
        return {
            "mode": t.mode,
            "samples_generated": totals["generated"],
            "samples_trained": totals["trained"],
            "samples_dropped_stale": totals["dropped_stale"],
            "samples_unused_at_end": unused,
            "samples_lost_on_restart": totals["lost_on_restart"],
            "accounting_exact": totals["generated"]
            == (totals["trained"] + totals["dropped_stale"] + unused + totals["lost_on_restart"]),
            "max_staleness_seen": ledger.max_staleness,
            "max_stale_batches_in_a_row": ledger.max_stale_in_row,
            "staleness_limit": t.staleness_limit if fully_async else 0,
            "sync_interval": t.sync_interval if fully_async else 1,
            "steps": ledger.step,
            "total_steps": t.total_steps,
            "policy_version": ledger.versions.get(ledger.step),
            "skipped_updates": ledger.skipped_updates,
            "samples_invalid": self.reward_watch.invalid,
            "reward_error_rate": self.reward_watch.rates(),
            "resumed_from_step": ledger.resumed_from,
            "learner_restores": self.learner_restores,
            "weight_syncs": fleet.weight_syncs,
            "weight_sync_failures": fleet.rollouters.sync_failures,
            "driver_pid": os.getpid(),
            "driver_fingerprint": prep.fingerprint,
            "rewards": provenance(prep.cfg.reward, workers, used=prep.rewards),
            "workers": [{**{k: w.get(k) for k in ("role", "node", "pid", "registry_fingerprint")},
                         **{k: w[k] for k in kept if k in w}} for w in workers],
            "devices": devices_summary(workers),
            "resources": prep.cfg.resources.to_dict(),
            "restarts": {
                "rollouter": fleet.rollouters.pool.restarts,
                "reward_client": fleet.reward_client.restarts,
                "reward_worker": counters["restarts"],
                "learner": fleet.learner_restarts,
            },
            "recreated": {
                "rollouter": fleet.rollouters.pool.recreated,
                "reward_client": fleet.reward_client.recreated,
                "learner": fleet.learners.recreated,
            },
            "rescored_samples": counters["rescored_samples"],
            "lost_calls": {**fleet.lost_calls, "rollouter": fleet.rollouters.lost_calls},
            "hung_rollouter_calls": fleet.rollouters.hung,
            "reward_pids": sorted(self.stats.reward_pids),
            "model_path": prep.model_path,
            "data": dict(prep.data_report),
            **self.evaluator.summary(),
            **self.stats.summary(),
        }
