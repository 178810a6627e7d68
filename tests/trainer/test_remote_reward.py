"""`reward.remote`: the trainer scores on a `rewardhub serve` server (a real process) instead of its own
workers."""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: serve_process
from serve_process import Server  # noqa: E402

from rewardhub_trainer.cli import train  # noqa: E402

pytestmark = pytest.mark.ray
pytest.importorskip("aiohttp")


def test_tiny_run_scores_on_a_remote_server(ray_session, tiny_config, tmp_path):
    served = tmp_path / "served.yaml"
    served.write_text("reward:\n  rewards:\n    - name: regex_match\n      kwargs: {pattern: '[0-9]'}\n")
    with Server(served) as server:
        # the server's terms are used (the trainer has none: with reward.remote, reward.rewards is empty)
        cfg = tiny_config(trainer={"mode": "sync", "total_steps": 3},
                          reward={"remote": {"url": server.url, "retry_for_s": 60}, "rewards": []})
        out = tmp_path / "run"
        summary = train(cfg, output=str(out))
        scored = server.metric("rewardhub_rows_total")
        samples = server.metric('rewardhub_reward_samples_total{reward="regex_match"}')
    assert summary["steps"] == 3 and summary["accounting_exact"] is True
    assert scored == samples == summary["samples_generated"] > 0
    assert "reward_worker" not in {w["role"] for w in summary["workers"]}
    assert [(r["name"], r["remote"], r["dist"]) for r in summary["rewards"]] == [
        ("regex_match", server.url, "rewardhub")
    ]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert all(r["rewards/regex_match/count"] == 8 for r in rows if "rewards/regex_match/count" in r)
    assert sum("rewards/regex_match/mean" in r for r in rows) == 3


def test_unreachable_server_stops_before_ray(tiny_config, tmp_path):
    from rewardhub.errors import UsageError

    cfg = tiny_config(reward={"remote": "http://127.0.0.1:9", "rewards": []})
    with pytest.raises(UsageError, match="reward.remote: reward server http://127.0.0.1:9 cannot be reached"):
        train(cfg, output=str(tmp_path / "run"))


def test_rewards_and_remote_together_stop_before_ray(tiny_config, tmp_path):
    from rewardhub.errors import UsageError

    cfg = tiny_config(reward={"remote": "http://127.0.0.1:9"})  # beside tiny.yaml's reward.rewards
    with pytest.raises(UsageError, match="reward.rewards and reward.remote are both set"):
        train(cfg, output=str(tmp_path / "run"))


class _Draining:
    """What a client meets on ``port`` while a server restarts: every connection is answered 503
    (as `rewardhub serve` answers while it drains) and counted."""

    def __init__(self, port: int) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen()
        self.sock.settimeout(0.2)
        self.hits = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(5)
                try:
                    conn.recv(65536)
                    conn.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                                 b"Content-Length: 40\r\nConnection: close\r\n\r\n"
                                 b'{"error": "the server is shutting down"}')
                except OSError:
                    pass
            self.hits += 1

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        self.sock.close()


def _wait(cond, what: str, limit: float = 300.0) -> None:
    end = time.monotonic() + limit
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_a_run_goes_on_through_a_server_restart(ray_session, tiny_config, tmp_path):
    served = tmp_path / "served.yaml"
    served.write_text("reward:\n  rewards:\n    - name: regex_match\n      kwargs: {pattern: '[0-9]'}\n")
    first = Server(served)
    port = int(first.url.rsplit(":", 1)[1])
    cfg = tiny_config(trainer={"mode": "sync", "total_steps": 2},
                      reward={"remote": {"url": first.url, "retry_for_s": 120}, "rewards": []})
    second: list[Server] = []
    failed: list[BaseException] = []

    def restart() -> None:
        # once the driver's start-up check has asked the server, it goes down before the first batch is
        # scored: the reward client meets 503s (counted), then a new server on the same address
        try:
            _wait(lambda: "rewardhub_requests_total{endpoint=\"/info\",code=\"200\"} 1" in
                  first.get("/metrics")[1], "the start-up check")
            first.proc.kill()
            first.stop()
            draining = _Draining(port)
            try:
                _wait(lambda: draining.hits >= 2, "the reward client's retries")
            finally:
                draining.close()
            second.append(Server(served, "--port", str(port)))
        except BaseException as exc:
            failed.append(exc)

    thread = threading.Thread(target=restart, daemon=True)
    thread.start()
    try:
        summary = train(cfg, output=str(tmp_path / "run"))
        thread.join(60)
        assert not failed, failed
        assert summary["steps"] == 2 and summary["accounting_exact"] is True
        assert second[0].metric("rewardhub_rows_total") == summary["samples_generated"] > 0
    finally:
        for server in [first, *second]:
            server.stop()
