"""Rows are named and kept right: an error names a row by its place in the input (row 4000), never
its place in a chunk or a request; a remote server's score that is not a finite number is a failure
of that row, never a number written out."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

TESTS = Path(__file__).resolve().parent


def env() -> dict[str, str]:
    return {"PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


MISBEHAVE = "reward:\n  rewards:\n    - module: rewards_for_tests\n      function: misbehave\n"


@pytest.mark.timeout(300)
def test_an_error_names_the_row_by_its_place_in_the_input(cli, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(MISBEHAVE)
    rows = [{"response": "ok:1"} for _ in range(4100)]
    rows[3999]["response"] = "raise"  # row 4000
    out = tmp_path / "o.jsonl"
    res = cli("score", str(cfg), write_jsonl(tmp_path / "d.jsonl", rows), "-o", str(out), env=env())
    assert res.returncode == 0, res.stderr
    error = read_jsonl(out)[3999]["errors"]["misbehave"]
    assert error.startswith("reward 'misbehave' on row 4000: "), error


@pytest.fixture(scope="module")
def misbehaving_server():
    from thread_server import ThreadServer

    from rewardhub.config.schema import validate_reward
    from rewardhub.execution import Runner

    with Runner.from_config(validate_reward({"rewards": [{"module": "rewards_for_tests",
                                                           "function": "misbehave"}]})) as runner:
        server = ThreadServer(runner)
        try:
            yield server
        finally:
            server.close()


@pytest.mark.timeout(300)
def test_a_remote_error_names_the_row_by_its_place_in_the_input(cli, tmp_path, misbehaving_server):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"reward:\n  remote: {misbehaving_server.url}\n")
    rows = [{"response": "ok:1"} for _ in range(300)]
    rows[279]["response"] = "raise"  # row 280: the 24th of score's second chunk
    out = tmp_path / "o.jsonl"
    res = cli("score", str(cfg), write_jsonl(tmp_path / "d.jsonl", rows), "-o", str(out), env=env())
    assert res.returncode == 0, res.stderr
    error = read_jsonl(out)[279]["errors"]["misbehave"]
    assert error.startswith("reward 'misbehave' on row 280: "), error
