"""`reward.remote`'s client while it waits: it learns whether the server is alive and has its request
(``GET /health?request=KEY``) and says so, and it ends a try on a server that stopped answering instead of
waiting out ``timeout_s``. Against real `rewardhub serve` processes on 127.0.0.1."""

from __future__ import annotations

import math
import os
import re
import signal
import threading
from pathlib import Path
from typing import Any

import pytest
from serve_process import Server
from serve_process import wait_for

from rewardhub.config.schema import RemoteConfig
from rewardhub.errors import RewardhubError
from rewardhub.execution.remote import RemoteScorer

pytest.importorskip("aiohttp")

WAITER = """\
import os
import time


def waiter(*, response, **kwargs):
    while response == "wait" and not os.path.exists({release!r}):
        time.sleep(0.02)
    return float(len(response))
"""


@pytest.fixture
def waiter_cfg(tmp_path: Path) -> tuple[Path, Path]:
    release = tmp_path / "release"
    (tmp_path / "waiter.py").write_text(WAITER.format(release=str(release)))
    cfg = tmp_path / "waiter.yaml"
    cfg.write_text(f"reward:\n  rewards:\n    - path: {tmp_path / 'waiter.py'}\n      function: waiter\n")
    return cfg, release


class _Background:
    def __init__(self, fn: Any) -> None:
        self.out: dict[str, Any] = {}
        self.thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self.thread.start()

    def _run(self, fn: Any) -> None:
        try:
            self.out["value"] = fn()
        except BaseException as exc:  # handed to the test's thread
            self.out["error"] = exc

    def result(self, timeout: float = 300) -> Any:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the client did not finish"
        if "error" in self.out:
            raise self.out["error"]
        return self.out["value"]


def _quick(scorer: RemoteScorer, every: float = 0.2, timeout: float = 1.0) -> RemoteScorer:
    scorer.http.probe_every_s = every
    scorer.http.probe_timeout_s = timeout
    return scorer


@pytest.mark.timeout(300)
def test_a_client_waiting_on_a_busy_server_learns_it_is_alive_and_has_the_request(waiter_cfg, capsys):
    """Before: silent for the whole wait (timeout_s, 600 s by default)."""
    cfg, release = waiter_cfg
    with Server(cfg) as server:
        scorer = _quick(RemoteScorer(server.url))
        scorer.info()
        job = _Background(lambda: scorer.score([{"response": "wait"}, {"response": "abc"}]))
        wait_for(lambda: "alive, and has POST /score" in (getattr(scorer.http.watch, "last", None) or ""),
                 "the client's probe finding its request at the server")
        release.touch()
        result = job.result()
        assert result.scores == [4.0, 3.0]
    err = capsys.readouterr().err
    assert re.search(rf"^reward server {re.escape(server.url)}: alive, and has POST /score \(2 rows, "
                     r"received [\d.]+ s ago; 1 of \d+ call slots busy", err, re.M), err
    assert "WARNING" not in err


@pytest.mark.timeout(300)
def test_a_hung_server_ends_the_try_long_before_timeout_s_and_is_named(waiter_cfg, capsys):
    """The server is stopped (SIGSTOP) while the request waits: the connection stays open and nothing
    answers. Before: the client waited out timeout_s (600 s) before its first retry. Now its probes go
    unanswered, each says so, and the third ends the try; the retries meet the same, and the error
    names the server."""
    cfg, release = waiter_cfg
    with Server(cfg) as server:
        scorer = _quick(RemoteScorer(RemoteConfig(url=server.url, timeout_s=600, retry_for_s=1)))
        scorer.info()
        job = _Background(lambda: scorer.score([{"response": "wait"}]))
        wait_for(lambda: scorer.http.watch is not None and scorer.http.watch.last is not None,
                 "the first probe's answer")
        os.kill(server.proc.pid, signal.SIGSTOP)
        try:
            with pytest.raises(RewardhubError) as caught:
                job.result()
        finally:
            os.kill(server.proc.pid, signal.SIGCONT)
            release.touch()  # the drain then has nothing left to wait for
    message = str(caught.value)
    assert message.startswith(f"reward server {server.url}: POST /score failed"), message
    err = capsys.readouterr().err
    assert f"WARNING: reward server {server.url}: no answer to GET /health" in err, err
    assert re.search(rf"^WARNING: reward server {re.escape(server.url)}: the server did not answer GET "
                     r"/health in 3 probes .* it is hung or gone; ending this try$", err, re.M), err


@pytest.mark.timeout(300)
def test_a_sample_holding_nan_is_sent_as_null_not_refused(waiter_cfg):
    """The server reads strict JSON (NaN is refused); a data file's missing value (a NaN float) in a
    sample is sent as null, so the batch is scored."""
    cfg, _ = waiter_cfg
    with Server(cfg) as server:
        sample = {"response": "abc", "extra_info": {"x": math.nan, "y": [math.inf]}}
        result = RemoteScorer(server.url).score([sample])
        assert result.scores == [3.0]


@pytest.mark.timeout(300)
def test_a_client_waiting_on_a_stuck_server_warns_naming_it(waiter_cfg, capsys):
    """A reward that holds every call slot past --stuck-after: the server is alive but stuck, and the
    waiting client says so with the server's reason, once while that holds."""
    cfg, release = waiter_cfg
    with Server(cfg, "--max-calls", "1", "--stuck-after", "0.5") as server:
        scorer = _quick(RemoteScorer(server.url))
        scorer.info()
        job = _Background(lambda: scorer.score([{"response": "wait"}]))
        wait_for(lambda: "the server says it is stuck" in (getattr(scorer.http.watch, "last", None) or ""),
                 "the client's probe finding the server stuck")
        probes = scorer.http.watch.probes
        wait_for(lambda: scorer.http.watch.probes >= probes + 2, "two more probes")
        release.touch()
        assert job.result().scores == [4.0]
    err = capsys.readouterr().err
    stuck = [line for line in err.splitlines() if "the server says it is stuck" in line]
    assert len(stuck) == 1, err  # said once, not at every probe
    assert stuck[0].startswith(f"WARNING: reward server {server.url}: POST /score has waited "), stuck
    assert "a reward may hang with no timeout_s" in stuck[0]
