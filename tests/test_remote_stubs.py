"""`reward.remote`'s client against small aiohttp stub servers, for what a real server does not do on
demand (never answer, HTML, a body cut short, shifted rows, 503s, a 413 under unpublished limits)."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from typing import Any

import pytest
from remote_client_helpers import _retries
from remote_client_helpers import _samples

from rewardhub.config.schema import RemoteConfig
from rewardhub.errors import RewardhubError
from rewardhub.execution.remote import RemoteScorer

web = pytest.importorskip("aiohttp.web")


# ---- stub servers: what a real server does not do on demand --------------------------------------

class Stub:
    """A small aiohttp server on 127.0.0.1, on a thread of its own: ``GET /info`` names one term ``t``
    (and ``limits``), ``POST /score`` is ``handler(stub, request, body)``; ``posts`` counts the POSTs."""

    def __init__(self, handler: Any, limits: dict[str, int] | None = None) -> None:
        self.handler, self.limits, self.posts = handler, limits, 0
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.url = asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(30)

    async def _start(self) -> str:
        self.release = asyncio.Event()
        app = web.Application()
        app.router.add_get("/info", self._info)
        app.router.add_post("/score", self._score)
        self.runner = web.AppRunner(app, shutdown_timeout=1.0)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", 0).start()
        return f"http://127.0.0.1:{self.runner.addresses[0][1]}"

    async def _info(self, request: Any) -> Any:
        return web.json_response({"terms": [{"name": "t"}], "rewards": [],
                                  **({"limits": self.limits} if self.limits else {})})

    async def _score(self, request: Any) -> Any:
        self.posts += 1
        return await self.handler(self, request, await request.json())

    def __enter__(self) -> Stub:
        return self

    def __exit__(self, *exc: Any) -> None:
        async def stop() -> None:
            self.release.set()
            await self.runner.cleanup()

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)
        self.loop.close()


def _scored(rows: list[dict[str, Any]], **change: Any) -> list[dict[str, Any]]:
    return [{**r, "score": 1.0, "rewards": {"t": 1.0}, "extra": {}, **change} for r in rows]


async def good(stub: Stub, request: Any, body: Any) -> Any:
    return web.json_response({"rows": _scored(body["rows"])})


async def never(stub: Stub, request: Any, body: Any) -> Any:
    await stub.release.wait()
    return await good(stub, request, body)


async def html(stub: Stub, request: Any, body: Any) -> Any:
    return web.Response(text="<html><body><h1>Welcome to nginx</h1></body></html>", content_type="text/html")


async def no_rewards(stub: Stub, request: Any, body: Any) -> Any:
    return web.json_response({"rows": [{k: v for k, v in r.items() if k != "rewards"}
                                       for r in _scored(body["rows"])]})


async def no_rows(stub: Stub, request: Any, body: Any) -> Any:
    return web.json_response({"results": _scored(body["rows"])})


async def numeric_errors(stub: Stub, request: Any, body: Any) -> Any:
    return web.json_response({"rows": _scored(body["rows"], errors={"t": 500})})


async def shifted(stub: Stub, request: Any, body: Any) -> Any:
    rows = _scored(body["rows"])
    return web.json_response({"rows": rows[1:] + rows[:1]})


async def too_few(stub: Stub, request: Any, body: Any) -> Any:
    return web.json_response({"rows": _scored(body["rows"])[:-1]})


async def cut_short(stub: Stub, request: Any, body: Any) -> Any:
    """1000 bytes announced, 27 sent, and the connection drops."""
    request.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                            b"Content-Length: 1000\r\n\r\n"
                            b'{"rows": [{"index": 0, "sco')
    request.transport.close()
    return web.Response()


async def cut_unannounced(stub: Stub, request: Any, body: Any) -> Any:
    """No length announced: the connection's end is the body's, so only the JSON shows the cut."""
    request.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n"
                            b'{"rows": [{"index": 0, "sco')
    request.transport.close()
    return web.Response()


async def unavailable_twice(stub: Stub, request: Any, body: Any) -> Any:
    if stub.posts <= 2:
        return web.json_response({"error": "the server is shutting down"}, status=503)
    return await good(stub, request, body)


async def limit_of_three(stub: Stub, request: Any, body: Any) -> Any:
    if len(body["rows"]) > 3:
        return web.json_response({"error": "more than this server's limit of 3"}, status=413)
    return await good(stub, request, body)


@pytest.mark.parametrize(("handler", "problem"), [
    (html, r"answered POST /score with 51 bytes of text/html that are not JSON .*'<html><body><h1>Welcome"),
    (no_rewards, "answered POST /score with the row of sample 0 without a 'rewards' object"),
    (no_rows, "answered POST /score with no 'rows' list"),
    (numeric_errors, "answered POST /score with the row of sample 0: its error of 't' is int 500, not "
                     "a text"),
    (shifted, "answered POST /score with the row of sample 0 carrying index 1, not 0: rows shifted"),
    (too_few, "answered POST /score with 3 rows for 4 samples"),
    (cut_unannounced, "answered POST /score with 27 bytes of application/json that are not JSON "
                      r"\(Unterminated string"),
])
def test_a_bad_answer_is_one_error_naming_the_server(handler, problem, tmp_path):
    with Stub(handler) as stub:
        with pytest.raises(RewardhubError, match=f"^reward server {re.escape(stub.url)} {problem}"):
            RemoteScorer(RemoteConfig(url=stub.url, retry_for_s=2)).score(_samples(4, tmp_path / "log"))
        assert stub.posts == 1  # not retried: a second answer would be as bad


def test_a_server_that_never_answers_is_given_up_on_within_the_bounds(tmp_path, capsys):
    with Stub(never) as stub:
        scorer = RemoteScorer(RemoteConfig(url=stub.url, timeout_s=1, retry_for_s=2))
        t0 = time.monotonic()
        with pytest.raises(RewardhubError, match=rf"^reward server {re.escape(stub.url)}: POST /score failed "
                                                 r"\d+ time\(s\) in \d+ s \(retried for "
                                                 r"reward.remote.retry_for_s=2\); the last: no answer "
                                                 r"within 1 s \(reward.remote.timeout_s\)"):
            scorer.score(_samples(2, tmp_path / "log"))
        spent = time.monotonic() - t0
    warnings = capsys.readouterr().err.splitlines()
    assert len(warnings) == _retries(scorer) >= 1
    assert all(w.startswith(f"WARNING: reward server {stub.url}: POST /score: no answer within")
               for w in warnings)
    # wall-clock socket timeouts: timeout_s 1 + retry_for_s 2 + the last try's 1 s = ~4 s (dff0e18's
    # client: 3 x 600 s); 30 s leaves a loaded machine room
    assert spent < 30


def test_an_answer_cut_short_is_retried_then_named(tmp_path):
    with Stub(cut_short) as stub:
        with pytest.raises(RewardhubError, match=rf"^reward server {re.escape(stub.url)}: POST /score failed "
                                                 r".*the last: the answer was cut short"):
            RemoteScorer(RemoteConfig(url=stub.url, retry_for_s=1)).score(_samples(2, tmp_path / "log"))
        assert stub.posts >= 2


def test_503_is_retried(tmp_path, capsys):
    with Stub(unavailable_twice) as stub:
        scorer = RemoteScorer(stub.url)
        assert scorer.score(_samples(2, tmp_path / "log")).scores == [1.0, 1.0]
        assert stub.posts == 3 and _retries(scorer) == 2
    assert "answered 503 Service Unavailable: the server is shutting down; retry 1" in capsys.readouterr().err


def test_a_413_under_unpublished_limits_halves_the_request(tmp_path, capsys):
    with Stub(limit_of_three) as stub:
        scorer = RemoteScorer(stub.url)
        batch = _samples(10, tmp_path / "log")
        assert scorer.score(batch).scores == [1.0] * 10
        posts = stub.posts  # 10 -> 5 + 5 -> (2 + 3) + (2 + 3): 3 refused, 4 answered
        assert posts == 7
        # what it learnt holds: 2 rows a request, none refused
        assert scorer.score(batch).scores == [1.0] * 10
        assert stub.posts - posts == 5
    assert "refused 10 rows as too large (413); sending at most 5 rows per request" in capsys.readouterr().err


class GroupStub(Stub):
    """A server whose one term is a group reward: its client never splits a group between requests."""

    async def _info(self, request: Any) -> Any:
        return web.json_response({"terms": [{"name": "t", "kind": "group"}], "rewards": []})


@pytest.mark.timeout(120)
def test_a_413_on_a_small_group_then_a_large_one_names_the_large_group():
    """Refused as 6 rows (a group of 1, then one of 5; no limit published): the request is cut between
    the groups, never into the same request again (that looped until Python's recursion limit), and
    the group of 5, refused alone, is one error naming it."""
    rows = [{"prompt": "p", "response": "r", "extra_info": {"uid": uid}} for uid in ["a"] + ["b"] * 5]
    with GroupStub(limit_of_three) as stub:
        with pytest.raises(RewardhubError, match=r"refused the group extra_info.uid='b' \(5 rows\) as too "
                                                 r"large \(413\), and a group reward needs a group in one"):
            RemoteScorer(stub.url).score(rows)
        assert stub.posts == 3  # 6 rows refused, then the group of 1 answered, the group of 5 refused
