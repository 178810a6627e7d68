"""What the trainer's fault test modules share: metrics rows, a role's pid, the accounting check."""

from __future__ import annotations

import json
from pathlib import Path

SPS = 8  # samples per step in tiny_config: 2 prompts x 4 responses


def _rows(out: Path) -> list[dict]:
    path = out / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _pid_of(run, role: str) -> int:
    return next(w["pid"] for w in run.fleet.workers if w["role"] == role)


def _check_accounting(summary: dict, rows: list[dict]) -> None:
    """generated = trained + dropped + unused + lost, with trained counted from the rows."""
    trained = sum(r["samples/step"] for r in rows)
    assert trained == summary["samples_trained"] == summary["steps"] * SPS
    assert [r["step"] for r in rows] == list(range(1, summary["steps"] + 1))
    assert summary["samples_generated"] == (
        trained
        + summary["samples_dropped_stale"]
        + summary["samples_unused_at_end"]
        + summary["samples_lost_on_restart"]
    )
    assert summary["accounting_exact"] is True
