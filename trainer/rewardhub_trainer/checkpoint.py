"""Checkpoint folders: ``DIR/checkpoints/step_NNNNNN`` with the learner's files and ``trainer_state.json``.

A checkpoint is written into a hidden ``.step_NNNNNN.tmp`` folder, the driver's state last, and
then renamed into place: a folder named ``step_*`` is always complete, whatever was killed when.
:class:`Checkpointer` is the run's part that decides when to save and remembers the latest one: where
a restarted learner continues from.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .config import TrainerConfig
from .ledger import Ledger
from .ledger import RestorePoint

__all__ = ["Checkpointer", "commit_checkpoint", "latest_checkpoint", "read_state", "staging_path",
           "write_state"]

STATE = "trainer_state.json"


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_state(path: Path, state: dict[str, Any]) -> None:
    """Write the driver's state into checkpoint folder ``path`` (atomically: written, then renamed)."""
    _write_atomic(path / STATE, json.dumps(state, indent=2, sort_keys=True) + "\n")


def read_state(path: Path) -> dict[str, Any]:
    return dict(json.loads((path / STATE).read_text()))


def staging_path(root: Path, step: int) -> Path:
    """An empty hidden folder under ``root`` to write the checkpoint of ``step`` into."""
    tmp = root / f".step_{step:06d}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)  # left by a writer that was killed
    root.mkdir(parents=True, exist_ok=True)
    return tmp


def commit_checkpoint(staged: Path, step: int, *, keep: int) -> Path:
    """Rename a complete staged checkpoint into place, point ``latest`` at it, keep the newest ``keep``.

    A step saved again (after the learner restarted from an earlier checkpoint) replaces the old one.
    """
    root = staged.parent
    final, old = root / f"step_{step:06d}", root / f".step_{step:06d}.old"
    shutil.rmtree(old, ignore_errors=True)  # left by a writer that was killed
    if final.exists():
        os.replace(final, old)
    os.replace(staged, final)
    shutil.rmtree(old, ignore_errors=True)
    _write_atomic(root / "latest", final.name + "\n")
    done = sorted(p for p in root.glob("step_*") if (p / STATE).exists())
    for p in done[: max(0, len(done) - keep)]:
        if p != final:
            shutil.rmtree(p, ignore_errors=True)
    return final


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete checkpoint under ``run_dir`` (a run's output folder, or a checkpoint)."""
    if (run_dir / STATE).exists():
        return run_dir
    root = run_dir / "checkpoints"
    if not root.is_dir():
        return None
    done = sorted(p for p in root.glob("step_*") if (p / STATE).exists())
    return done[-1] if done else None


class Checkpointer:
    """When a run saves (``trainer.checkpoint_every`` steps, ``checkpoint_minutes``, the last step), and
    its latest checkpoint (:attr:`restore_point`)."""

    def __init__(self, out: Path, t: TrainerConfig, start: RestorePoint) -> None:
        self.root = out / "checkpoints"
        self.every, self.minutes, self.keep = t.checkpoint_every, t.checkpoint_minutes, t.checkpoint_keep
        self.total_steps = t.total_steps
        self.restore_point = start  #: where a restarted learner continues from
        self.last_t = time.monotonic()

    def due(self, step: int) -> bool:
        """Whether the run saves after training step ``step``."""
        return bool((self.every and step % self.every == 0) or step == self.total_steps
                    or (self.minutes and time.monotonic() - self.last_t >= self.minutes * 60))

    def save(self, ledger: Ledger, save_learner: Callable[[str], None], config: dict[str, Any],
             rewards: dict[str, str] | None = None) -> Path:
        """Save atomically: the learner's files (``save_learner(folder)``) and the ledger's state (with
        the run's ``config`` and its ``rewards``' identities) into a hidden folder, then renamed into
        place."""
        staged = staging_path(self.root, ledger.step)
        save_learner(str(staged))
        write_state(staged, {**ledger.carried(), "config": config, "rewards": dict(rewards or {})})
        path = commit_checkpoint(staged, ledger.step, keep=self.keep)
        self.restore_point = ledger.point(str(path))
        self.last_t = time.monotonic()
        return path
