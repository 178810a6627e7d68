"""`rewardhub serve`: what a client gets depends on its own request only. Requests pooled while a call
is busy never share a group (two clients whose uids both start at 0), a malformed request fails alone,
and a client that disconnects stops costing reward calls. The real app on 127.0.0.1 (aiohttp), one
Runner call at a time (``max_calls=1``) so that requests pool while a gated call holds the slot."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("aiohttp")

CFG = {"rewards": [{"module": "rewards_groups", "function": "group_size", "kind": "group"},
                   {"module": "rewards_groups", "function": "logged", "weight": 0.0}]}


@pytest.fixture(scope="module")
def server():
    from thread_server import ThreadServer

    from rewardhub.config.schema import validate_reward
    from rewardhub.execution import Runner

    with Runner.from_config(validate_reward(CFG)) as runner:
        srv = ThreadServer(runner, max_calls=1)
        try:
            yield srv
        finally:
            srv.close()


def wait_for(cond: Any, what: str, limit: float = 60.0) -> None:
    end = time.monotonic() + limit
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def rows(n: int, uid: int, log: Path, gate: Path | None = None, prompt: str = "p") -> list[dict[str, Any]]:
    info: dict[str, Any] = {"uid": uid, "log": str(log), **({"gate": str(gate)} if gate else {})}
    return [{"prompt": prompt, "response": f"r{i}", "extra_info": info} for i in range(n)]


class Client:
    """Posts to the server from its own loop; ``post`` returns a concurrent future of (status, JSON)."""

    def __init__(self, srv: Any) -> None:
        self.srv = srv

    def post(self, body: Any) -> Any:
        async def go() -> tuple[int, Any]:
            from aiohttp import ClientSession

            async with ClientSession() as s, s.post(f"{self.srv.url}/score", json=body) as r:
                return r.status, await r.json()

        return asyncio.run_coroutine_threadsafe(go(), self.srv.loop)


def batcher(srv: Any) -> Any:
    from rewardhub.server.app import BATCHER

    return srv.app[BATCHER]


def hold_the_slot(srv: Any, tmp_path: Path) -> tuple[Any, Path]:
    """A request whose call waits for a gate file: the next requests queue behind it."""
    gate = tmp_path / "gate"
    held = Client(srv).post({"rows": rows(1, 999, tmp_path / "held.log", gate)})
    wait_for(lambda: (tmp_path / "held.log").exists(), "the held call to start")
    return held, gate


@pytest.mark.timeout(120)
def test_two_clients_with_the_same_uids_and_prompt_are_graded_apart(server, tmp_path):
    held, gate = hold_the_slot(server, tmp_path)
    a = Client(server).post({"rows": rows(3, 0, tmp_path / "a.log")})
    b = Client(server).post({"rows": rows(3, 0, tmp_path / "b.log")})
    wait_for(lambda: len(batcher(server)._queue) == 2, "both requests to queue")
    gate.touch()
    assert held.result(60)[0] == 200
    (sa, ja), (sb, jb) = a.result(60), b.result(60)
    assert sa == sb == 200
    assert [r["score"] for r in ja["rows"]] == [r["score"] for r in jb["rows"]] == [3.0] * 3  # not 6.0


@pytest.mark.timeout(120)
def test_a_malformed_request_fails_alone(server, tmp_path):
    held, gate = hold_the_slot(server, tmp_path)
    good = Client(server).post({"rows": rows(2, 1, tmp_path / "a.log")})
    wait_for(lambda: len(batcher(server)._queue) == 1, "the good request to queue")
    bad = Client(server).post({"rows": [{"messages": [{"role": "user", "content": "hi"}]}]})
    wait_for(lambda: bad.done() or len(batcher(server)._queue) == 2, "the bad request to be seen")
    gate.touch()
    assert held.result(60)[0] == 200
    status, body = good.result(60)
    assert status == 200, body
    assert [r["score"] for r in body["rows"]] == [2.0, 2.0]
    status, body = bad.result(60)
    assert status == 400 and "sample 0: its messages hold no assistant turn" in body["error"], body


@pytest.mark.timeout(120)
def test_a_client_that_disconnects_stops_costing_calls(server, tmp_path):
    log, gate = tmp_path / "gone.log", tmp_path / "gone.gate"
    gone = Client(server).post({"rows": rows(12, 5, log, gate)})
    wait_for(lambda: log.exists(), "the first call to start")
    gone.cancel()  # the client goes away: its connection is closed
    wait_for(lambda: gone.done(), "the client to stop")
    wait_for(lambda: batcher(server)._queue == [] and all(
        p.future.cancelled() for _, batch in batcher(server).busy.values() for p in batch),
        "the server to see it")
    gate.touch()
    wait_for(lambda: not batcher(server).busy, "the call to end")
    assert log.read_text().split() == ["r0"]  # not all 12
