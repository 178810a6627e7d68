"""The reward cache's file is a help, never a risk (issue 42 §2, §6): an entry that is not a score is never
written out as one; a damaged file, another tool's, or one that cannot be written (a full disk, made real
with a file-size limit) gives one WARNING line and every row is still scored. Real `rewardhub score` runs."""

from __future__ import annotations

import json
import os
import resource
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

REWARD = """
def counted(*, response, log):
    with open(log, "a") as f:
        f.write(response + "\\n")
    return float(len(response))
"""
RESPONSES = ["a", "bb", "ccc", "dddd", "eeeee", "ffffff"]


def _setup(tmp_path: Path, responses: list[str] = RESPONSES, log: str = "") -> list[str]:
    (tmp_path / "r.py").write_text(REWARD)
    (tmp_path / "cfg.json").write_text(json.dumps({"reward": {"rewards": [
        {"path": str(tmp_path / "r.py"), "function": "counted", "cache": True,
         "kwargs": {"log": log or str(tmp_path / "calls.txt")}}]}}))
    (tmp_path / "data.jsonl").write_text("".join(json.dumps({"prompt": "p", "response": r}) + "\n"
                                                for r in responses))
    return ["score", str(tmp_path / "cfg.json"), str(tmp_path / "data.jsonl"), "--cache",
            str(tmp_path / "cache"), "--no-progress"]


def _scores(res: subprocess.CompletedProcess[str]) -> list[float]:
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    return [json.loads(line)["score"] for line in res.stdout.splitlines() if line.startswith("{")]


def _calls(tmp_path: Path) -> int:
    log = tmp_path / "calls.txt"
    n = len(log.read_text().splitlines()) if log.exists() else 0
    log.unlink(missing_ok=True)
    return n


def _warnings(res: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in res.stderr.splitlines() if line.startswith("WARNING:") and "cache" in line]


def test_hand_edited_entries_are_misses_with_one_warning_and_are_written_over(cli, tmp_path):
    args = _setup(tmp_path)
    want = [float(len(r)) for r in RESPONSES]
    assert _scores(cli(*args)) == want and _calls(tmp_path) == 6
    db = sqlite3.connect(tmp_path / "cache" / "scores.sqlite")
    keys = [k for (k,) in db.execute("SELECT key FROM scores ORDER BY key")]
    bad = ["[1e400, {}]", "[true, {}]", "[NaN, {}]", '["7", {}]', "[1.0]", "not json"]
    with db:
        db.executemany("UPDATE scores SET entry = ? WHERE key = ?", list(zip(bad, keys)))
    db.close()
    res = cli(*args)
    assert _scores(res) == want and _calls(tmp_path) == 6  # each scored again, none taken as a score
    assert len(_warnings(res)) == 1 and "holds an entry that is not a score" in res.stderr
    res = cli(*args)
    assert _scores(res) == want and _calls(tmp_path) == 0 and not _warnings(res)  # written over


@pytest.mark.parametrize("damage", ["garbage", "another tool", "journal"])
def test_a_damaged_or_foreign_cache_file_warns_and_every_row_is_scored(cli, tmp_path, damage):
    args = _setup(tmp_path)
    path = tmp_path / "cache" / "scores.sqlite"
    path.parent.mkdir()
    if damage == "garbage":
        path.write_bytes(b"SQLite format 3\x00" + os.urandom(3000))
    elif damage == "another tool":
        db = sqlite3.connect(path)
        with db:
            db.execute("CREATE TABLE users (name TEXT)")
        db.close()
    else:  # a hot journal that cannot be opened: every read of the file fails
        sqlite3.connect(path).execute("CREATE TABLE scores (key TEXT PRIMARY KEY, entry TEXT NOT NULL)")
        (tmp_path / "cache" / "scores.sqlite-journal").mkdir()
    before = path.read_bytes()
    res = cli(*args)
    assert _scores(res) == [float(len(r)) for r in RESPONSES] and _calls(tmp_path) == 6
    assert len(_warnings(res)) == 1 and "scoring goes on without it" in res.stderr, res.stderr
    assert path.read_bytes() == before  # another tool's file is left as it was


@pytest.mark.timeout(300)
def test_a_full_disk_warns_and_keeps_every_row(tmp_path):
    """A file-size limit makes every write past 32 KiB fail as a full disk does (EFBIG; sqlite: "database
    or disk is full"); the rows go to stdout, a pipe the limit does not bound."""
    responses = [f"{k:05d}" * 20 for k in range(1500)]
    args = _setup(tmp_path, responses, log=os.devnull)  # the calls' log would meet the limit too
    limit = 32 * 1024

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    res = subprocess.run([sys.executable, "-m", "rewardhub", *args], capture_output=True, text=True,
                         preexec_fn=small_files, timeout=240)
    assert _scores(res) == [100.0] * 1500
    warnings = _warnings(res)
    assert len(warnings) == 1 and "cannot write it" in warnings[0] and "full" in warnings[0], res.stderr
