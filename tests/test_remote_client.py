"""`reward.remote`'s client: its config, and against real `rewardhub serve` processes (a restart, the
server's limits, a request sent again); tests/test_remote_stubs.py has the stub servers."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from remote_client_helpers import _retries
from remote_client_helpers import _samples
from serve_process import Server

from rewardhub.config.schema import RemoteConfig
from rewardhub.config.schema import validate_reward
from rewardhub.errors import RewardhubError
from rewardhub.errors import UsageError
from rewardhub.execution.remote import RemoteScorer

pytest.importorskip("aiohttp.web")  # the servers are aiohttp apps

COUNTED = """\
reward:
  rewards:
    - module: rewards_remote
      function: counted
      timeout_s: 120
"""


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
