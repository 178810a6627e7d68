"""The run's ledger: the one owner of its step, its place in the data, and what became of each sample.

A sample is *generated* when its rollout comes back from a rollouter, and then ends as *trained*,
*dropped as stale* (by the message queue), *unused at the end*, or *lost on restart* (the learner
died: what it trained after its latest checkpoint, and everything in flight, is thrown away and the
run continues from that checkpoint); ``summary.json`` says whether those add up
(``accounting_exact``). Plain numbers, no Ray: the other parts of a run read the ledger and tell it
what happened, and only this module writes ``step``, ``cursor`` and ``consumed``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["COUNTS", "Ledger", "RestorePoint"]

COUNTS = ("generated", "trained", "dropped_stale", "lost_on_restart")


@dataclass(frozen=True)
class RestorePoint:
    """Where a restarted learner continues from: the run's latest checkpoint (or its start)."""

    path: str | None  #: the checkpoint folder; None: the run's starting weights
    step: int
    cursor: int  #: the batch index to generate next from there
    trained: int  #: samples trained up to it (this run's and the resumed run's)


class Ledger:
    """Counts, step, data cursor and policy versions of one run (resumed: carried from the checkpoint)."""

    def __init__(self, state: Mapping[str, Any] | None = None) -> None:
        """``state``: a checkpoint's ``trainer_state.json`` (:func:`.checkpoint.read_state`) to go on from."""
        self.counts = dict.fromkeys(COUNTS, 0)  #: this run's
        self.prior = dict.fromkeys(COUNTS, 0)  #: carried from the checkpoint it resumed from
        self.step = 0  #: optimizer steps taken (trained batches)
        self.cursor = 0  #: the next batch index to generate
        self.consumed = 0  #: the next batch index the queue hands out (trained or dropped)
        self.max_staleness = 0
        self.stale_in_row = self.max_stale_in_row = 0
        self.skipped_updates = 0  #: optimizer updates the learner skipped (non-finite loss or gradient)
        self.versions: dict[int, int] = {}  #: weights tag (a step) -> policy version (optimizer updates)
        self.resumed_from: int | None = None
        if state is not None:
            self.step = self.resumed_from = int(state["step"])
            self.cursor = self.consumed = int(state["data_cursor"])
            self.prior.update(state["counts"])
            self.max_staleness = int(state.get("max_staleness_seen", 0))

    def started(self, version: int) -> None:
        """The learner started (or resumed) at policy ``version``."""
        self.versions[self.step] = version

    def next_batch(self) -> int:
        """The index of the next batch to generate (each is generated once, unless the run rewinds)."""
        index, self.cursor = self.cursor, self.cursor + 1
        return index

    def generated(self, samples: int) -> None:
        self.counts["generated"] += samples

    def dropped(self, batch_index: int, samples: int) -> int:
        """The queue dropped a batch as stale: the number of batches dropped in a row, this one included."""
        self.counts["dropped_stale"] += samples
        self.consumed = batch_index + 1
        self.stale_in_row += 1
        self.max_stale_in_row = max(self.max_stale_in_row, self.stale_in_row)
        return self.stale_in_row

    def trained(self, batch_index: int, samples: int, staleness: int, *, version: int, skipped: int) -> int:
        """A batch was trained (the learner is now at policy ``version``): returns the batches dropped
        just before it."""
        self.counts["trained"] += samples
        self.consumed = batch_index + 1
        self.step += 1
        self.max_staleness = max(self.max_staleness, staleness)
        self.versions[self.step] = version
        self.skipped_updates += skipped
        in_row, self.stale_in_row = self.stale_in_row, 0
        return in_row

    def totals(self) -> dict[str, int]:
        """Each count, the resumed run's included."""
        return {k: self.prior[k] + self.counts[k] for k in self.counts}

    def carried(self) -> dict[str, Any]:
        """What a checkpoint keeps: only what was consumed (batches still in flight are generated again)."""
        totals = self.totals()
        counts = {k: totals[k] for k in ("trained", "dropped_stale", "lost_on_restart")}
        counts["generated"] = sum(counts.values())
        return {"step": self.step, "data_cursor": self.consumed, "counts": counts,
                "max_staleness_seen": self.max_staleness}

    def point(self, path: str | None) -> RestorePoint:
        """A restore point at the ledger's consumed batches (a checkpoint just written to ``path``)."""
        return RestorePoint(path=path, step=self.step, cursor=self.consumed, trained=self.totals()["trained"])

    def rewind(self, point: RestorePoint, in_flight: int, version: int) -> int:
        """The learner was restored to ``point`` at policy ``version``: what it trained after the point, and
        the ``in_flight`` samples, are lost. Returns the samples lost."""
        undone = self.totals()["trained"] - point.trained
        self.counts["trained"] -= undone
        self.counts["lost_on_restart"] += in_flight + undone
        self.step = point.step
        self.cursor = self.consumed = point.cursor
        self.versions = {k: v for k, v in self.versions.items() if k < self.step}
        self.versions[self.step] = version
        return in_flight + undone
