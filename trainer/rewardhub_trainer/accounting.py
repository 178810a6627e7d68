"""The driver's bookkeeping: each sample generated, trained or dropped, each step's metrics, the summary.

:class:`Accounting` is a part of :class:`rewardhub_trainer.loop.Run` kept in its own module (as
:mod:`.recovery` is). A sample is *generated* when its rollout comes back from a rollouter, and then
ends as *trained*, *dropped as stale*, *unused at the end*, or *lost on restart*; ``summary.json``
says whether those add up (``accounting_exact``).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping
from typing import Any

from .actors import Rollout
from .devices import devices_summary
from .faults import RunAborted
from .reward_failures import invalid_samples
from .rewards import provenance
from .runstate import RunState

__all__ = ["COUNTS", "Accounting"]

COUNTS = ("generated", "trained", "dropped_stale", "lost_on_restart")


class Accounting(RunState):
    """Counting samples and steps, and the run's summary (mixed into ``Run``)."""

    def _generated(self, rollout: Rollout) -> None:
        self.counts["generated"] += rollout.num_samples
        self.stats.busy("rollouter", rollout.gen_s)

    def _dropped(self, dropped: list[dict[str, int]]) -> None:
        for d in dropped:
            self.counts["dropped_stale"] += d["samples"]
            self.consumed = d["batch_index"] + 1
            self.stale_in_row += 1
            self.max_stale_in_row = max(self.max_stale_in_row, self.stale_in_row)
            self.stats.dropped(d, self.stale_in_row)
            limit = self.t.max_stale_batches
            if self.stale_in_row == (limit + 1) // 2:
                print(f"WARNING: dropped {self.stale_in_row} batch(es) in a row as stale "
                      f"(the run stops at {limit})", file=sys.stderr)
            if self.stale_in_row >= limit:
                raise RunAborted(
                    f"message queue: dropped {self.stale_in_row} batch(es) in a row as stale (trainer."
                    f"staleness_limit={self.t.staleness_limit}); raise trainer.staleness_limit or "
                    "trainer.max_stale_batches, or lower trainer.sync_interval")

    def _trained(self, item: Rollout, staleness: int, result: Mapping[str, float]) -> None:
        self.counts["trained"] += item.num_samples
        self.consumed = item.batch.index + 1
        self.step += 1
        self.max_staleness = max(self.max_staleness, staleness)
        self.versions[self.step] = int(result["version"])
        self.skipped_updates += int(result.get("optim/skipped_steps", 0))
        invalid = invalid_samples(item.rewards)
        extra = {
            "policy_version": self.versions.get(item.version, item.version),
            "weights_step": item.version,
            "stale/batches_in_a_row": self.stale_in_row,
            "samples/invalid": invalid,
        }
        self.stale_in_row = 0
        metrics = self.stats.step(self.step, item, staleness, result, self._totals(),
                                  queue_size=self._queue_size, extra=extra)
        failing = self.reward_watch.step(item.reward_failures, invalid)
        if failing:
            raise RunAborted(failing)
        if int(result.get("optim/nonfinite_in_row", 0)) >= self.t.max_nonfinite_steps:
            raise RunAborted(
                f"learner: {int(result['optim/nonfinite_in_row'])} optimizer updates in a row skipped "
                f"(non-finite loss or gradient, step {self.step}); lower trainer.lr or check the rewards")
        every, minutes = self.t.checkpoint_every, self.t.checkpoint_minutes
        if ((every and self.step % every == 0) or self.step == self.t.total_steps
                or (minutes and time.monotonic() - self.last_checkpoint_t >= minutes * 60)):
            self._checkpoint()
        for cb in self.callbacks:
            cb(self.step, metrics, self)
        self.evaluator.after_step(self.step)

    def _totals(self) -> dict[str, int]:
        return {k: self.prior[k] + self.counts[k] for k in self.counts}

    def _finish(self, leftovers: list[Rollout]) -> dict[str, Any]:
        import ray

        unused = sum(r.num_samples for r in leftovers)
        totals = self._totals()
        workers = self._infos()
        self._check_fingerprints(workers)
        counters = {"restarts": 0, "rescored_samples": 0}
        for c in ray.get([h.counters.remote() for h in self.reward_client.handles]):
            counters = {k: counters[k] + c[k] for k in counters}
        summary = {
            "mode": self.t.mode,
            "samples_generated": totals["generated"],
            "samples_trained": totals["trained"],
            "samples_dropped_stale": totals["dropped_stale"],
            "samples_unused_at_end": unused,
            "samples_lost_on_restart": totals["lost_on_restart"],
            "accounting_exact": totals["generated"]
            == (totals["trained"] + totals["dropped_stale"] + unused + totals["lost_on_restart"]),
            "max_staleness_seen": self.max_staleness,
            "max_stale_batches_in_a_row": self.max_stale_in_row,
            "staleness_limit": self.t.staleness_limit if self.t.mode == "fully_async" else 0,
            "sync_interval": self.t.sync_interval if self.t.mode == "fully_async" else 1,
            "steps": self.step,
            "total_steps": self.t.total_steps,
            "policy_version": self.versions.get(self.step),
            "skipped_updates": self.skipped_updates,
            "samples_invalid": self.reward_watch.invalid,
            "reward_error_rate": self.reward_watch.rates(),
            "resumed_from_step": self.resumed_from,
            "learner_restores": self.learner_restores,
            "weight_syncs": self.weight_syncs,
            "weight_sync_failures": self.rollouters.sync_failures,
            "driver_pid": os.getpid(),
            "driver_fingerprint": self.prep.fingerprint,
            "rewards": provenance(self.cfg.reward, workers, used=self.prep.rewards),
            "workers": [
                {
                    **{k: w.get(k) for k in ("role", "node", "pid", "registry_fingerprint")},
                    **{
                        k: w[k]
                        for k in (
                            "pool",
                            "rank",
                            "gpu_ids",
                            "cuda_visible",
                            "device",
                            "dtype",
                            "registry_builds",
                        )
                        if k in w
                    },
                }
                for w in workers
            ],
            "devices": devices_summary(workers),
            "resources": self.cfg.resources.to_dict(),
            "restarts": {
                "rollouter": self.rollouters.pool.restarts,
                "reward_client": self.reward_client.restarts,
                "reward_worker": counters["restarts"],
                "learner": self.learner_restarts,
            },
            "recreated": {
                "rollouter": self.rollouters.pool.recreated,
                "reward_client": self.reward_client.recreated,
                "learner": self.learners.recreated,
            },
            "rescored_samples": counters["rescored_samples"],
            "lost_calls": {**self.lost_calls, "rollouter": self.rollouters.lost_calls},
            "hung_rollouter_calls": self.rollouters.hung,
            "reward_pids": sorted(self.stats.reward_pids),
            "model_path": self.prep.model_path,
            "data": dict(self.prep.data_report),
            **self.evaluator.summary(),
            **self.stats.summary(),
        }
        self._stop_actors()
        (self.out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
        return summary
