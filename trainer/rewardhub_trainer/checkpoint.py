"""Checkpoint folders: ``DIR/checkpoints/step_NNNNNN`` with the learner's files and ``trainer_state.json``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["latest_checkpoint", "read_state", "write_state"]

STATE = "trainer_state.json"


def write_state(path: Path, state: dict[str, Any]) -> None:
    """Write the driver's state last, atomically: a folder without it is not a checkpoint."""
    tmp = path / (STATE + ".tmp")
    tmp.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path / STATE)
    (path.parent / "latest").write_text(path.name + "\n")


def read_state(path: Path) -> dict[str, Any]:
    return dict(json.loads((path / STATE).read_text()))


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete checkpoint under ``run_dir`` (a run's output folder, or a checkpoint)."""
    if (run_dir / STATE).exists():
        return run_dir
    root = run_dir / "checkpoints"
    if not root.is_dir():
        return None
    done = sorted(p for p in root.glob("step_*") if (p / STATE).exists())
    return done[-1] if done else None
