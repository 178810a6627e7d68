"""The run is composed of parts that own their state: the ledger (no Ray), the checkpointer, the fleet,
the schedule, the evaluator. The ledger's arithmetic and the checkpointer's decisions are tested here
as plain objects; the whole run is tested by the training tests."""

from __future__ import annotations

import ast
import inspect
import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

from rewardhub_trainer.checkpoint import Checkpointer
from rewardhub_trainer.checkpoint import latest_checkpoint
from rewardhub_trainer.checkpoint import read_state
from rewardhub_trainer.ledger import Ledger
from rewardhub_trainer.ledger import RestorePoint

PACKAGE = Path(inspect.getfile(Ledger)).parent


def test_a_ledger_counts_each_sample_once_and_says_when_the_numbers_add_up():
    ledger = Ledger()
    assert [ledger.next_batch() for _ in range(4)] == [0, 1, 2, 3] and ledger.cursor == 4
    for _ in range(4):
        ledger.generated(8)
    assert ledger.dropped(0, 8) == 1 and ledger.dropped(1, 8) == 2  # two stale batches in a row
    assert ledger.max_stale_in_row == 2 and ledger.consumed == 2
    assert ledger.trained(2, 8, staleness=1, version=5, skipped=0) == 2  # the drops just before it
    assert ledger.stale_in_row == 0 and ledger.step == 1 and ledger.consumed == 3
    assert ledger.versions == {1: 5} and ledger.max_staleness == 1
    assert ledger.totals() == {"generated": 32, "trained": 8, "dropped_stale": 16, "lost_on_restart": 0}
    # a checkpoint keeps what was consumed; batch 3 is still in flight and will be generated again
    assert ledger.carried() == {"step": 1, "data_cursor": 3, "max_staleness_seen": 1,
                                "counts": {"generated": 24, "trained": 8, "dropped_stale": 16,
                                           "lost_on_restart": 0}}


def test_a_resumed_ledger_goes_on_from_the_checkpoint_and_counts_both_runs():
    first = Ledger()
    for i in range(3):
        first.generated(8)
        first.trained(first.next_batch(), 8, staleness=0, version=i + 1, skipped=0)
    resumed = Ledger(json.loads(json.dumps(first.carried())))
    assert (resumed.step, resumed.cursor, resumed.consumed, resumed.resumed_from) == (3, 3, 3, 3)
    assert resumed.next_batch() == 3
    resumed.generated(8)
    resumed.trained(3, 8, staleness=0, version=4, skipped=1)
    assert resumed.totals()["trained"] == 32 and resumed.counts["trained"] == 8
    assert resumed.skipped_updates == 1


def test_rewinding_to_a_restore_point_counts_what_was_trained_after_it_and_in_flight_as_lost():
    ledger = Ledger()
    for i in range(2):
        ledger.generated(8)
        ledger.trained(ledger.next_batch(), 8, staleness=0, version=i + 1, skipped=0)
    point = ledger.point("/ckpt/step_000002")
    assert point == RestorePoint(path="/ckpt/step_000002", step=2, cursor=2, trained=16)
    for i in range(2, 4):
        ledger.generated(8)
        ledger.trained(ledger.next_batch(), 8, staleness=0, version=i + 1, skipped=0)
    ledger.generated(8)
    ledger.next_batch()  # batch 4 in flight when the learner dies
    assert ledger.rewind(point, in_flight=8, version=2) == 24
    assert (ledger.step, ledger.cursor, ledger.consumed) == (2, 2, 2)
    assert ledger.versions == {1: 1, 2: 2}
    totals = ledger.totals()
    assert totals == {"generated": 40, "trained": 16, "dropped_stale": 0, "lost_on_restart": 24}
    assert totals["generated"] == totals["trained"] + totals["lost_on_restart"]


def _trainer(**kw):
    base = {"checkpoint_every": 2, "checkpoint_minutes": 0.0, "checkpoint_keep": 2, "total_steps": 5}
    return types.SimpleNamespace(**{**base, **kw})


def test_the_checkpointer_saves_every_n_steps_and_the_last_and_points_at_the_newest(tmp_path):
    ledger = Ledger()
    ckpt = Checkpointer(tmp_path, _trainer(), ledger.point(None))
    assert [s for s in range(1, 6) if ckpt.due(s)] == [2, 4, 5]
    saved: list[str] = []

    def save_learner(folder: str) -> None:
        saved.append(folder)
        Path(folder).mkdir()  # the learner makes the staged folder
        (Path(folder) / "weights.bin").write_bytes(b"w")

    for step in range(1, 6):
        ledger.generated(4)
        ledger.trained(ledger.next_batch(), 4, staleness=0, version=step, skipped=0)
        if ckpt.due(step):
            ckpt.save(ledger, save_learner, {"trainer": {"total_steps": 5}})
    assert len(saved) == 3 and all(".tmp" in s for s in saved)  # written staged, then renamed
    latest = latest_checkpoint(tmp_path)
    assert latest is not None and latest.name == "step_000005" and (latest / "weights.bin").exists()
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("step_*")) == ["step_000004", "step_000005"]
    state = read_state(latest)
    assert state["step"] == 5 and state["data_cursor"] == 5 and state["counts"]["trained"] == 20
    assert state["config"] == {"trainer": {"total_steps": 5}}
    assert ckpt.restore_point == RestorePoint(path=str(latest), step=5, cursor=5, trained=20)


def test_the_checkpointer_also_saves_when_the_minutes_have_passed(tmp_path, monkeypatch):
    import rewardhub_trainer.checkpoint as checkpoint

    now = [1000.0]
    monkeypatch.setattr(checkpoint.time, "monotonic", lambda: now[0])
    ckpt = Checkpointer(tmp_path, _trainer(checkpoint_every=0, checkpoint_minutes=1.0, total_steps=100),
                        Ledger().point(None))
    assert not ckpt.due(1)
    now[0] += 61
    assert ckpt.due(2)


def _assigned_attributes(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            while isinstance(target, ast.Subscript):  # x.versions[k] = ... writes x.versions
                target = target.value
            for t in ast.walk(target):
                if isinstance(t, ast.Attribute):
                    names.add(t.attr)
    return names


def test_the_step_and_the_data_cursor_are_written_by_the_ledger_alone():
    writers = {p.name for p in PACKAGE.glob("*.py")
               if _assigned_attributes(p) & {"step", "cursor", "consumed", "counts", "versions"}}
    assert writers == {"ledger.py"}


def test_the_run_is_composed_not_mixed_in():
    from rewardhub_trainer.evaluate import Evaluator
    from rewardhub_trainer.loop import Run

    assert Run.__bases__ == (object,)
    # the evaluator gets typed collaborators, not the run
    hints = inspect.signature(Evaluator.__init__).parameters
    assert [hints[k].annotation for k in ("prep", "fleet", "stats")] == ["Prepared", "Fleet", "StepStats"]
    for part in ("loop", "ledger", "fleet", "checkpoint", "schedule", "evaluate"):
        # no probing of attributes that may not be there yet
        assert "getattr(self, " not in (PACKAGE / f"{part}.py").read_text(), part


def test_the_ledger_and_the_checkpointer_load_without_ray():
    code = ("import sys, rewardhub_trainer.ledger, rewardhub_trainer.checkpoint; "
            "print(sorted(m for m in ('ray', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("mode", ["sync", "fully_async"])
def test_make_schedule_picks_the_mode(mode):
    from rewardhub_trainer.schedule import AsyncSchedule
    from rewardhub_trainer.schedule import SyncSchedule
    from rewardhub_trainer.schedule import make_schedule

    ledger = Ledger()
    schedule = make_schedule(types.SimpleNamespace(mode=mode), 2, None, None, ledger, None, None)
    assert type(schedule) is (SyncSchedule if mode == "sync" else AsyncSchedule)
    assert schedule.flight.next_put == 0
