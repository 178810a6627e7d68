"""`reward.remote`'s client: against real `rewardhub serve` processes (a restart, the server's limits, a
request sent again), and against small aiohttp stub servers for what a real server does not do on demand
(never answer, HTML, a body cut short, shifted rows, 503s, a 413 under unpublished limits)."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from serve_process import Server

from rewardhub.config.schema import RemoteConfig
from rewardhub.config.schema import validate_reward
from rewardhub.errors import RewardhubError
from rewardhub.errors import UsageError
from rewardhub.execution.remote import RemoteScorer

web = pytest.importorskip("aiohttp.web")

COUNTED = """\
reward:
  rewards:
    - module: rewards_remote
      function: counted
      timeout_s: 120
"""


def _samples(n: int, log: Path, gate: Path | None = None, first: int = 0) -> list[dict[str, Any]]:
    info: dict[str, Any] = {"log": str(log), **({"gate": str(gate)} if gate else {})}
    return [{"prompt": "p", "response": f"r{first + i}" + "x" * (i % 5), "ground_truth": None,
             "data_source": None, "extra_info": info} for i in range(n)]


def _lengths(samples: list[dict[str, Any]]) -> list[float]:
    return [float(len(s["response"])) for s in samples]


def _calls(log: Path) -> list[str]:
    return sorted(log.read_text().split()) if log.exists() else []


def _wait_for(cond: Any, what: str, limit: float = 120.0) -> None:
    end = time.monotonic() + limit
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _retries(scorer: RemoteScorer) -> int:
    return int(getattr(getattr(scorer, "http", None), "retries", 0))


class _Background:
    """``fn()`` on a thread; ``result()`` is its value, or raises what it raised."""

    def __init__(self, fn: Any) -> None:
        self.out: dict[str, Any] = {}
        self.thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self.thread.start()

    def _run(self, fn: Any) -> None:
        try:
            self.out["value"] = fn()
        except BaseException as exc:  # handed to the test's thread
            self.out["error"] = exc

    def alive(self) -> bool:
        return self.thread.is_alive()

    def result(self, timeout: float = 120) -> Any:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the client did not finish"
        if "error" in self.out:
            raise self.out["error"]
        return self.out["value"]


@pytest.fixture
def counted_cfg(tmp_path: Path) -> Path:
    path = tmp_path / "counted.yaml"
    path.write_text(COUNTED)
    return path


# ---- the config ---------------------------------------------------------------------------------

def test_remote_is_a_url_or_a_mapping_with_timeouts():
    assert validate_reward({"remote": "http://127.0.0.1:8000/"}).remote == RemoteConfig(url="http://127.0.0.1:8000")
    cfg = validate_reward({"remote": {"url": "http://10.0.0.5:8000", "retry_for_s": 60, "timeout_s": 30,
                                      "connect_timeout_s": 2}}).remote
    assert cfg == RemoteConfig(url="http://10.0.0.5:8000", timeout_s=30, connect_timeout_s=2, retry_for_s=60)
    with pytest.raises(UsageError, match="reward.remote.timeout_s=0.0 is not valid"):
        validate_reward({"remote": {"url": "http://10.0.0.5:8000", "timeout_s": 0}})
    with pytest.raises(UsageError, match="unknown key reward.remote.tries"):
        validate_reward({"remote": {"url": "http://10.0.0.5:8000", "tries": 3}})
    with pytest.raises(UsageError, match="reward.remote.url=None is not a server URL"):
        validate_reward({"remote": {"retry_for_s": 3}})


def test_an_override_under_a_remote_url_keeps_the_url(tmp_path):
    from rewardhub.config import load_plan

    path = tmp_path / "remote.yaml"
    path.write_text("reward:\n  remote: http://127.0.0.1:8000\n")
    assert load_plan(str(path), ["reward.remote.retry_for_s=60"]).reward.remote == RemoteConfig(
        url="http://127.0.0.1:8000", retry_for_s=60)


def test_rewards_and_remote_together_are_refused():
    with pytest.raises(UsageError, match=r"reward.rewards and reward.remote are both set(.|\n)*remove "
                                         "reward.rewards"):
        validate_reward({"remote": "http://127.0.0.1:8000", "rewards": [{"name": "exact_match"}]})


# ---- real servers -------------------------------------------------------------------------------

def test_a_restarted_server_is_retried_until_it_answers(counted_cfg, tmp_path, capsys):
    log = tmp_path / "calls.log"
    first = Server(counted_cfg)
    port = first.url.rsplit(":", 1)[1]
    scorer = RemoteScorer(first.url)  # `reward.remote: URL`: the default retry_for_s
    assert scorer.score(_samples(3, log)).scores == _lengths(_samples(3, log))
    first.proc.kill()
    first.stop()
    batch = _samples(5, log, first=3)
    call = _Background(lambda: scorer.score(batch))
    _wait_for(lambda: _retries(scorer) >= 2 or not call.alive(), "two retries")
    with Server(counted_cfg, "--port", port):  # the same address, a new process
        res = call.result()
    assert res.scores == _lengths(batch)
    assert _calls(log) == sorted(s["response"] for s in _samples(3, log) + batch)  # each row scored once
    warnings = [w for w in capsys.readouterr().err.splitlines() if w.startswith("WARNING:")]
    assert len(warnings) == _retries(scorer) >= 2
    assert all(w.startswith(f"WARNING: reward server http://127.0.0.1:{port}: POST /score: cannot connect")
               for w in warnings)


def test_a_batch_over_the_servers_limits_is_split(counted_cfg, tmp_path):
    log = tmp_path / "calls.log"
    batch = _samples(20, log)
    with Server(counted_cfg, "--max-rows", "7") as server:
        res = RemoteScorer(server.url).score(batch)
        assert res.scores == _lengths(batch)
        assert server.metric('rewardhub_requests_total{endpoint="/score",code="200"}') == 3  # 7 + 7 + 6
    assert _calls(log) == sorted(s["response"] for s in batch)
    # bytes: --max-body-mb 0.002 is 2097 bytes, a row here ~140: the batch goes in several requests, no 413
    with Server(counted_cfg, "--max-body-mb", "0.002") as server:
        res = RemoteScorer(server.url).score(batch)
        assert res.scores == _lengths(batch)
        assert server.metric('rewardhub_requests_total{endpoint="/score",code="200"}') >= 2
        with pytest.raises(KeyError):
            server.metric('rewardhub_requests_total{endpoint="/score",code="413"}')
        big = [{**batch[0], "response": "y" * 3000}]
        with pytest.raises(RewardhubError, match="sample 0 is 3.* bytes as JSON, more than the reward "
                                                 "server's limit of 2097 bytes"):
            RemoteScorer(server.url).score(big)


def _post(url: str, body: bytes, key: str | None) -> tuple[int, Any]:
    headers = {"Content-Type": "application/json", **({"Idempotency-Key": key} if key else {})}
    req = urllib.request.Request(url + "/score", data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_a_request_sent_again_is_answered_not_scored_again(counted_cfg, tmp_path):
    log = tmp_path / "calls.log"
    body = json.dumps({"rows": _samples(3, log)}).encode()
    with Server(counted_cfg) as server:
        first = _post(server.url, body, "k-1")
        again = _post(server.url, body, "k-1")
        assert first == again and first[0] == 200
        assert len(_calls(log)) == 3
        status, answer = _post(server.url, json.dumps({"rows": _samples(2, log)}).encode(), "k-1")
        assert status == 400 and "came before with another body" in answer["error"]
        _post(server.url, body, None)  # no key: scored again
        assert len(_calls(log)) == 6


def test_a_timed_out_answer_is_waited_for_not_scored_again(counted_cfg, tmp_path, capsys):
    log, gate = tmp_path / "calls.log", tmp_path / "gate"
    batch = _samples(4, log, gate)
    with Server(counted_cfg) as server:
        try:
            scorer = RemoteScorer(RemoteConfig(url=server.url, timeout_s=1, retry_for_s=300))
            call = _Background(lambda: scorer.score(batch))
            _wait_for(lambda: _retries(scorer) >= 2 or not call.alive(), "two retries")
        finally:
            gate.touch()  # the reward's calls go on
        res = call.result()
    assert res.scores == _lengths(batch)
    assert _calls(log) == sorted(s["response"] for s in batch)  # each once, through every retry
    assert "POST /score: no answer within 1 s (reward.remote.timeout_s); retry 1" in capsys.readouterr().err


def test_recent_requests_keep_answers_not_failures_and_within_their_rows():
    from rewardhub.server._idempotency import RecentRequests

    calls: list[int] = []

    async def score(n: int, fail: bool = False) -> list[int]:
        calls.append(n)
        if fail:
            raise RuntimeError("boom")
        return [n]

    async def run() -> None:
        recent: RecentRequests[list[int]] = RecentRequests(max_rows=4)
        assert await recent.answer("a", b"1", 3, lambda: score(1)) == [1]
        assert await recent.answer("a", b"1", 3, lambda: score(2)) == [1]  # answered, not scored
        with pytest.raises(RuntimeError, match="boom"):
            await recent.answer("f", b"x", 1, lambda: score(3, fail=True))
        assert await recent.answer("f", b"x", 1, lambda: score(4)) == [4]  # a failure is not kept
        await recent.answer("b", b"2", 2, lambda: score(5))  # 3 + 1 + 2 rows > 4: the oldest, a, goes
        assert await recent.answer("a", b"1", 3, lambda: score(6)) == [6]  # f and b go: 3 rows kept
        assert await recent.answer("a", b"1", 3, lambda: score(7)) == [6]
        assert recent.replayed == 2

    asyncio.run(run())
    assert calls == [1, 3, 4, 5, 6]


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
