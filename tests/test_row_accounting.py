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


# ---- a remote server's numbers -----------------------------------------------------------------

class ScoreStub:
    """An aiohttp server on 127.0.0.1 (its own thread) answering ``POST /score`` with ``answer(rows)``, a
    JSON text, for one term ``t``: what a real server does not send on demand."""

    def __init__(self, answer: Any) -> None:
        import asyncio
        import threading

        self.answer = answer
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.url = asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(30)

    async def _start(self) -> str:
        from aiohttp import web

        async def info(request: Any) -> Any:
            return web.json_response({"terms": [{"name": "t"}], "rewards": []})

        async def score(request: Any) -> Any:
            rows = (await request.json())["rows"]
            return web.Response(text=self.answer(rows), content_type="application/json")

        app = web.Application()
        app.router.add_get("/info", info)
        app.router.add_post("/score", score)
        self.runner = web.AppRunner(app, shutdown_timeout=1.0)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", 0).start()
        return f"http://127.0.0.1:{self.runner.addresses[0][1]}"

    def close(self) -> None:
        import asyncio

        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)
        self.loop.close()


#: what each row's score and reward are sent as (raw JSON)
SENT = ["0.5", "1e400", "-1e400", "NaN", '"0.5"', "true", "0.25"]


def _answer(rows: list[dict[str, Any]]) -> str:
    parts = []
    for r in rows:
        sent = SENT[r["index"]]
        parts.append(f'{{"index": {r["index"]}, "score": {sent}, "rewards": {{"t": {sent}}}, "extra": {{}}}}')
    return '{"rows": [' + ",".join(parts) + "]}"


@pytest.mark.timeout(120)
def test_a_remote_score_that_is_not_a_finite_number_fails_its_row(cli, tmp_path):
    stub = ScoreStub(_answer)
    try:
        cfg = tmp_path / "c.yaml"
        cfg.write_text(f"reward:\n  remote: {stub.url}\n")
        out = tmp_path / "o.jsonl"
        data = write_jsonl(tmp_path / "d.jsonl", [{"response": f"r{i}"} for i in range(len(SENT))])
        res = cli("score", str(cfg), data, "-o", str(out), env=env())
    finally:
        stub.close()
    assert res.returncode == 0, res.stderr
    rows = read_jsonl(out)
    assert [r["score"] for r in rows] == [0.5, None, None, None, None, None, 0.25]
    assert [r["rewards"]["t"] for r in rows] == [0.5, None, None, None, None, None, 0.25]
    assert rows[1]["errors"]["t"] == f"reward server {stub.url} sent inf as reward 't': not a finite number"
    assert rows[4]["error_kinds"] == {"t": "error"}
    assert all("errors" not in rows[i] for i in (0, 6))
    assert "Infinity" not in out.read_text() and "NaN" not in out.read_text()


# ---- on_failure: drop beside other terms -------------------------------------------------------

DROP_CFG = """\
reward:
  rewards:
    - module: rewards_for_tests
      function: misbehave
      on_failure: drop
    - module: rewards_groups
      function: length
      weight: 0.5
"""


def test_a_dropped_failure_is_told_apart_from_a_low_score():
    from rewardhub.config.schema import validate_reward
    from rewardhub.execution import Runner
    from rewardhub.scoring import score_rows

    cfg = validate_reward({"rewards": [
        {"module": "rewards_for_tests", "function": "misbehave", "on_failure": "drop"},
        {"module": "rewards_groups", "function": "length", "weight": 0.5}]})
    with Runner.from_config(cfg) as runner:
        res = runner.score([{"response": "ok:1"}, {"response": "raise"}])
        rows = score_rows(runner, [{"response": "ok:1"}, {"response": "raise"}]).results
    assert res.scores == [3.0, 2.5]  # the crash reads as a lower score ...
    assert res.dropped == [[], ["misbehave"]]  # ... unless the result's dropped terms are read
    assert rows[1]["rewards"]["misbehave"] is None and rows[1]["error_kinds"] == {"misbehave": "error"}


@pytest.mark.timeout(300)
def test_score_and_check_say_what_drop_does(cli, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(DROP_CFG)
    data = write_jsonl(tmp_path / "d.jsonl", [{"response": "ok:1"}, {"response": "raise"}])
    res = cli("score", str(cfg), data, "-o", str(tmp_path / "o.jsonl"), env=env())
    assert res.returncode == 0, res.stderr
    said = ("on_failure: drop on 'misbehave': where it fails, a sample's score is the other rewards' "
            "('length') alone, so its failure reads as a lower score, not as no reward")
    assert f"note: reward 'misbehave' failed on 1 rows; {said}" in res.stderr
    checked = cli("check", str(cfg), env=env())
    assert checked.returncode == 0, checked.stderr
    assert f"note: reward.rewards[0]: {said}" in checked.stdout
