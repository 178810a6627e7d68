"""Nothing paid for is thrown away: every row scored before `rewardhub score` stops (SIGTERM, Ctrl-C, a
remote server that dies) is in the kept `.partial` output and in the cache; Ctrl-C exits 130 with one
line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

TESTS = Path(__file__).resolve().parent


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}


def wait_for(cond: Any, what: str, limit: float = 120.0) -> None:
    end = time.monotonic() + limit
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def data(tmp_path: Path, n: int, wait_at: int) -> tuple[Path, Path, Path]:
    log, gate = tmp_path / "calls.log", tmp_path / "gate"
    info = {"log": str(log), "gate": str(gate)}
    rows = [{"response": ("wait" if i == wait_at else "r") + str(i), "extra_info": info} for i in range(n)]
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path, log, gate


class Run:
    """``rewardhub score`` in a subprocess; its stderr lines are read as they come (``err``)."""

    def __init__(self, cfg: Path, data_path: Path, out: Path, *extra: str) -> None:
        import threading

        self.proc = subprocess.Popen([sys.executable, "-m", "rewardhub", "score", str(cfg), str(data_path),
                                      "-o", str(out), *extra], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True, env=env())
        self.lines: list[str] = []
        self.reader = threading.Thread(target=lambda: self.lines.extend(iter(self.proc.stderr.readline, "")),
                                       daemon=True)
        self.reader.start()

    def said(self, text: str) -> bool:
        return any(text in line for line in list(self.lines))

    def end(self) -> tuple[int, str]:
        code = self.proc.wait(120)
        self.reader.join(30)
        self.proc.stderr.close()
        return code, "".join(self.lines)


def held_cfg(tmp_path: Path, cache: bool) -> Path:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("reward:\n  rewards:\n    - module: rewards_groups\n      function: held\n"
                   + ("      cache: true\n" if cache else ""))
    return cfg


@pytest.mark.timeout(300)
def test_sigterm_keeps_every_row_scored_so_far(tmp_path):
    data_path, log, gate = data(tmp_path, 300, 206)
    out = tmp_path / "o.jsonl"
    run = Run(held_cfg(tmp_path, cache=False), data_path, out)
    wait_for(lambda: "wait206" in lines(log), "row 207's call")
    run.proc.send_signal(signal.SIGTERM)
    wait_for(lambda: run.said("stopping: no new reward call starts"), "the run to stop")
    gate.touch()  # the call in flight ends
    code, err = run.end()
    assert code == 128 + signal.SIGTERM, err
    assert Path(f"{out}.partial").exists(), err
    called = lines(log)
    kept = [json.loads(x) for x in Path(f"{out}.partial").read_text().splitlines()]
    assert 207 <= len(called) < 300
    assert [r["response"] for r in kept] == called  # every row called is kept, in order ...
    assert [r["score"] for r in kept] == [float(len(r)) for r in called]
    assert f"ERROR: interrupted (SIGTERM) after {len(called)} of 300 rows" in err  # ... not "after 0"


@pytest.mark.timeout(300)
def test_ctrl_c_keeps_the_answers_paid_for_in_the_cache_and_exits_130(tmp_path):
    data_path, log, gate = data(tmp_path, 300, 100)
    cfg, out, cache = held_cfg(tmp_path, cache=True), tmp_path / "o.jsonl", tmp_path / "cache"
    run = Run(cfg, data_path, out, "--cache", str(cache))
    wait_for(lambda: "wait100" in lines(log), "row 101's call")
    run.proc.send_signal(signal.SIGINT)
    wait_for(lambda: run.said("stopping: no new reward call starts"), "the run to stop")
    gate.touch()
    code, err = run.end()
    assert code == 130, err
    assert err.strip().splitlines()[-1] == ("ERROR: interrupted (SIGINT) after 101 of 300 rows; the 101 rows "
                                            f"scored so far are in {out}.partial ({out} is unchanged)")
    assert "Traceback" not in err
    assert len(Path(f"{out}.partial").read_text().splitlines()) == 101
    paid = lines(log)
    assert paid == [f"r{i}" for i in range(100)] + ["wait100"]
    log.unlink()
    again = subprocess.run([sys.executable, "-m", "rewardhub", "score", str(cfg), str(data_path),
                            "-o", str(out), "--cache", str(cache)],
                           capture_output=True, text=True, env=env(), timeout=120)
    assert again.returncode == 0, again.stderr
    assert lines(log) == [f"r{i}" for i in range(101, 300)]  # the 101 answers paid for came from the cache


@pytest.mark.timeout(300)
def test_a_server_that_dies_mid_run_leaves_the_rows_it_scored(tmp_path):
    from serve_process import Server

    data_path, log, gate = data(tmp_path, 300, 120)
    server_cfg = tmp_path / "s.yaml"
    server_cfg.write_text("reward:\n  rewards:\n    - module: rewards_groups\n      function: held\n")
    out = tmp_path / "o.jsonl"
    with Server(server_cfg, "--max-rows", "50") as server:
        cfg = tmp_path / "c.yaml"
        cfg.write_text(f"reward:\n  remote:\n    url: {server.url}\n    retry_for_s: 1\n")
        run = Run(cfg, data_path, out)
        wait_for(lambda: "wait120" in lines(log), "row 121's call")
        server.proc.kill()
        code, err = run.end()
        gate.touch()
    assert code == 1, err
    kept = [json.loads(x) for x in Path(f"{out}.partial").read_text().splitlines()]
    assert [r["response"] for r in kept] == [f"r{i}" for i in range(100)]  # the two requests answered
    assert f"note: the 100 rows scored so far are in {out}.partial" in err


@pytest.mark.timeout(120)
def test_ctrl_c_before_scoring_exits_130_with_one_line(tmp_path):
    marker = tmp_path / "importing"
    reward = tmp_path / "slow_import.py"
    reward.write_text(f"import pathlib, time\npathlib.Path({str(marker)!r}).touch()\ntime.sleep(600)\n"
                      "def compute_score(*, response, **kw):\n    return 1.0\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"reward:\n  rewards:\n    - path: {reward}\n")
    data_path = tmp_path / "d.jsonl"
    data_path.write_text('{"response": "a"}\n')
    run = Run(cfg, data_path, tmp_path / "o.jsonl")
    wait_for(marker.exists, "the reward's import")
    run.proc.send_signal(signal.SIGINT)
    code, err = run.end()
    assert code == 130, err
    assert err.strip().splitlines() == ["ERROR: interrupted (SIGINT)"], err
