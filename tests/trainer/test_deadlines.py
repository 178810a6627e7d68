"""Hung actors are restarted like dead ones (trainer.call_timeout_s), and a data-parallel rank's own
error is what the run reports, at once, not rank 0's collective timeout that follows it.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from rewardhub_trainer.cli import train
from rewardhub_trainer.ddp import lead

pytestmark = pytest.mark.ray

SPS = 8


@pytest.mark.timeout(120)
def test_a_rank_error_is_raised_at_once_naming_the_rank(ray_session):
    import ray

    @ray.remote
    def rank_fails() -> None:
        raise ValueError("rank 1 ran out of memory")

    gate = threading.Event()

    def own() -> None:  # rank 0's part: waits in a collective for the rank that failed
        if not gate.wait(90):
            raise TimeoutError("gloo: collective timed out after 90s")

    t0 = time.monotonic()
    try:
        with pytest.raises(RuntimeError, match=r"^learner rank 1: ValueError: rank 1 ran out of memory$"):
            lead(own, [rank_fails.remote()], timeout_s=90)
        assert time.monotonic() - t0 < 45
    finally:
        gate.set()


@pytest.mark.timeout(400)
def test_a_hung_rollouter_is_restarted_like_a_dead_one(ray_session, tiny_config, tmp_path):
    """fully_async: the rollouter is frozen (SIGSTOP) while it generates; past trainer.call_timeout_s
    it is killed, Ray restarts it, its batch is generated again, and the run finishes."""
    stopped: list[int] = []

    def freeze(step, metrics, run):
        if step == 2 and not stopped:
            pid = next(w["pid"] for w in run.fleet.workers if w["role"] == "rollouter")
            os.kill(pid, signal.SIGSTOP)
            stopped.append(pid)

    out = tmp_path / "o"
    t0 = time.monotonic()
    try:
        summary = train(tiny_config(trainer={"mode": "fully_async", "total_steps": 5, "call_timeout_s": 15}),
                        output=str(out), callbacks=[freeze])
    finally:
        for pid in stopped:  # never leave a frozen process behind
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert time.monotonic() - t0 < 330
    assert stopped and summary["steps"] == 5
    assert summary["hung_rollouter_calls"] >= 1 and summary["restarts"]["rollouter"] >= 1
    assert stopped[0] not in [w["pid"] for w in summary["workers"] if w["role"] == "rollouter"]
    rows = [json.loads(x) for x in Path(out / "metrics.jsonl").read_text().splitlines()]
    assert [r["batch_index"] for r in rows] == list(range(5))  # no batch skipped or repeated
    assert summary["accounting_exact"] is True
