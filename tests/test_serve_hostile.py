"""``rewardhub serve`` under clients that do not play along, each kind against a real server process on
127.0.0.1: headers it cannot decode, tokens that could never match, web pages posting to a loopback
server, numbers at the edge of the float range, one request's failure, half-sent requests and
connections that never finish their headers, and rewards that hang with no timeout."""

from __future__ import annotations

import concurrent.futures
import json
import socket
from pathlib import Path

import pytest
from serve_process import Server
from serve_process import wait_for

pytest.importorskip("aiohttp")

REPO = Path(__file__).resolve().parent.parent
EXAMPLE_CFG = REPO / "examples" / "score.yaml"
MISBEHAVE = """\
reward:
  rewards:
    - module: rewards_for_tests
      function: misbehave
"""


def _raw(server: Server, data: bytes, timeout: float = 30) -> tuple[int, dict]:
    """Send ``data`` as it is on a fresh connection; the answer's status and JSON body."""
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(data)
        chunks = []
        while True:
            got = s.recv(65536)
            if not got:
                break
            chunks.append(got)
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


ROW = b'{"rows": [{"response": "ok:0.5"}]}'


def _post(path: str, headers: dict[str, bytes | str], body: bytes = ROW) -> bytes:
    lines = [f"POST {path} HTTP/1.1".encode(), b"Connection: close", f"Content-Length: {len(body)}".encode()]
    for k, v in headers.items():
        lines.append(k.encode() + b": " + (v if isinstance(v, bytes) else v.encode()))
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


@pytest.fixture(scope="module")
def misbehave_cfg(tmp_path_factory):
    cfg = tmp_path_factory.mktemp("serve") / "misbehave.yaml"
    cfg.write_text(MISBEHAVE)
    return cfg


# ---- (e) an Authorization header that is not ASCII ------------------------------------------------
def test_authorization_that_is_not_ascii_is_a_401(misbehave_cfg):
    with Server(misbehave_cfg, env={"REWARDHUB_SERVE_TOKEN": "s3cret"}) as server:
        port = server.url.rsplit(":", 1)[1]
        json_ct = {"Host": f"127.0.0.1:{port}", "Content-Type": "application/json"}
        for value in ("Bearer s3cr\xe9t".encode("latin-1"), "Bearer s3crét".encode(), b"Bearer \xff\xfe",
                      "Bëarer s3cret".encode()):
            status, body = _raw(server, _post("/score", {**json_ct, "Authorization": value}))
            assert status == 401, (value, body)
            assert "bearer token" in body["error"]
        status, body = _raw(server, _post("/score", {**json_ct, "Authorization": "Bearer s3cret"}))
        assert status == 200 and body["rows"][0]["score"] == 0.5
        assert 'code="500"' not in server.get("/metrics", token="s3cret")[1]


# ---- (d) a token no client can send -----------------------------------------------------------------
@pytest.mark.parametrize("token", ["s3cret ", " s3cret", "s3cret\n", "s3c\x01ret", "s3crét"])
def test_a_token_that_could_never_match_is_refused_at_start(cli, token):
    res = cli("serve", str(EXAMPLE_CFG), "--port", "0", env={"REWARDHUB_SERVE_TOKEN": token}, timeout=60)
    assert res.returncode == 2, res.stderr
    assert res.stderr.startswith("ERROR: $REWARDHUB_SERVE_TOKEN "), res.stderr
    assert "no client could send it" in res.stderr
    assert "Traceback" not in res.stderr


# ---- (c) a web page posting to a loopback server ----------------------------------------------------
def test_web_pages_cannot_reach_a_loopback_server(misbehave_cfg):
    """A page can send a 'simple' cross-origin POST (text/plain, no preflight), and DNS rebinding
    makes the page's own name point at 127.0.0.1: the server wants JSON's content type, refuses a
    foreign Origin, and (bound to loopback) a Host that does not name this machine."""
    with Server(misbehave_cfg) as server:
        port = server.url.rsplit(":", 1)[1]
        here = f"127.0.0.1:{port}"
        cases = [
            ({"Host": here, "Content-Type": "text/plain"}, 415, "Content-Type: application/json"),
            ({"Host": here}, 415, "Content-Type: application/json"),
            ({"Host": here, "Content-Type": "application/x-www-form-urlencoded"}, 415, "application/json"),
            ({"Host": here, "Content-Type": "application/json", "Origin": "https://evil.example"}, 403,
             "Origin"),
            ({"Host": here, "Content-Type": "application/json", "Origin": "null"}, 403, "Origin"),
            ({"Host": f"evil.example:{port}", "Content-Type": "application/json",
              "Origin": f"http://evil.example:{port}"}, 403, "Host"),
            ({"Host": f"evil.example:{port}", "Content-Type": "application/json"}, 403, "Host"),
        ]
        for headers, want_status, want in cases:
            status, body = _raw(server, _post("/score", headers))
            assert status == want_status, (headers, body)
            assert want in body["error"], (headers, body)
        status, body = _raw(server, _post("/get_reward", {"Host": here, "Content-Type": "text/plain"},
                                          b'{"query": ["ok:0.5"]}'))
        assert status == 415
        get = f"GET /info HTTP/1.1\r\nHost: evil.example:{port}\r\nConnection: close\r\n\r\n".encode()
        assert _raw(server, get)[0] == 403  # what a rebound page could read
        # what real clients send passes: loopback names, the server's own origin, JSON with a charset
        for host, extra in ((here, {}), (f"localhost:{port}", {}), (f"[::1]:{port}", {}),
                            (here, {"Origin": f"http://{here}"}),
                            (here, {"Content-Type": "application/json; charset=utf-8"})):
            headers = {"Host": host, "Content-Type": "application/json", **extra}
            status, body = _raw(server, _post("/score", headers))
            assert status == 200 and body["rows"][0]["score"] == 0.5, (headers, body)
    # bound beyond loopback (with a token), any Host name is fine: clients reach it by many names
    with Server(misbehave_cfg, "--host", "0.0.0.0", env={"REWARDHUB_SERVE_TOKEN": "s3cret"}) as server:
        port = server.url.rsplit(":", 1)[1]
        headers = {"Host": f"rewards.cluster.local:{port}", "Content-Type": "application/json",
                   "Authorization": "Bearer s3cret"}
        status, body = _raw(server, _post("/score", headers))
        assert status == 200, body


# ---- a reward that waits for the test's word, and logs every call -------------------------------------
JUDGE = """\
import os
import time


def billed_judge(*, response, **kwargs):
    with open({log!r}, "a") as f:
        f.write(response + "\\n")
    if response == "wait":
        while not os.path.exists({release!r}):
            time.sleep(0.02)
    if response == "raise":
        raise RuntimeError("boom")
    return float(response.rsplit(":", 1)[-1]) if ":" in response else 1.0
"""


def _judge(tmp_path: Path, policy: str = "") -> tuple[Path, Path, Path]:
    """A config whose one reward logs each call to a file and, on ``wait``, waits for a file to exist
    (so that a test holds the one call slot while it queues requests): (config, log, release)."""
    log, release = tmp_path / "calls.txt", tmp_path / "release"
    (tmp_path / "billed.py").write_text(JUDGE.format(log=str(log), release=str(release)))
    cfg = tmp_path / "judge.yaml"
    cfg.write_text(f"reward:\n  rewards:\n    - path: {tmp_path / 'billed.py'}\n"
                   f"      function: billed_judge\n      timeout_s: 60\n{policy}")
    return cfg, log, release


# ---- (g) numbers at the edge of the float range -----------------------------------------------------
def test_huge_finite_scores_fail_no_request_pooled_with_them(tmp_path):
    """1e308 + 1e308 passes the float range in the batch's mean: the server answered 500 to every
    request pooled with such rows. Now each gets its numbers (A holds the one call while B, C, D
    queue, so that they are pooled into the next call)."""
    cfg, _, release = _judge(tmp_path)
    with Server(cfg, "--max-calls", "1") as server:
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            a = pool.submit(server.post, "/score", {"rows": [{"response": "wait"}]})
            wait_for(lambda: server.metric("rewardhub_inflight_batches") == 1, "A's call running")
            b = pool.submit(server.post, "/score", {"rows": [{"response": "ok:1e308"}] * 2})
            c = pool.submit(server.post, "/score", {"rows": [{"response": "ok:0.5"}]})
            d = pool.submit(server.post, "/get_reward", {"query": ["ok:inf", "ok:-inf", "ok:0.25"]})
            wait_for(lambda: server.metric("rewardhub_inflight_requests") == 4, "B, C and D waiting")
            release.touch()
            (sb, bb), (sc, bc), (sd, bd) = b.result(), c.result(), d.result()
            assert a.result()[0] == 200
        assert sb == 200 and [r["score"] for r in bb["rows"]] == [1e308, 1e308], bb
        assert sc == 200 and bc["rows"][0]["score"] == 0.5, bc
        assert sd == 200 and bd["rewards"][2] == 0.25, bd
        assert server.metric("rewardhub_batches_total") == 2  # B, C and D pooled into one call


# ---- a client that goes away ----------------------------------------------------------------------
def test_the_rows_of_a_client_that_went_away_are_not_scored(tmp_path):
    """B's request waits while A holds the one call (--max-calls 1); B's client closes its connection.
    Its handler is cancelled, so B's rows are dropped from the queue: the reward never sees them
    (before: scored after A, for nobody, holding up whoever came next)."""
    cfg, log, release = _judge(tmp_path)
    with Server(cfg, "--max-calls", "1") as server:
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            a = pool.submit(server.post, "/score", {"rows": [{"response": "wait"}]})
            wait_for(lambda: server.metric("rewardhub_inflight_batches") == 1, "A's call running")
            host, port = server.url.removeprefix("http://").rsplit(":", 1)
            gone = socket.create_connection((host, int(port)), timeout=30)
            body = b'{"rows": [{"response": "gone:0.5"}, {"response": "gone:0.25"}]}'
            headers = {"Host": f"{host}:{port}", "Content-Type": "application/json"}
            gone.sendall(_post("/score", headers, body))
            wait_for(lambda: server.metric("rewardhub_inflight_requests") == 2, "B waiting")
            gone.close()
            wait_for(lambda: server.metric("rewardhub_inflight_requests") == 1, "B's handler cancelled")
            release.touch()
            assert a.result()[0] == 200
        status, answer = server.post("/score", {"rows": [{"response": "c:0.75"}]})
        assert status == 200 and answer["rows"][0]["score"] == 0.75
    assert sorted(log.read_text().split()) == ["c:0.75", "wait"]


# ---- (f) on_failure: raise in one request -------------------------------------------------------
def test_a_raising_request_fails_alone_and_no_row_is_scored_twice(tmp_path):
    """B and C wait while A holds the one call (--max-calls 1), then are pooled into one; C's row
    raises (on_failure: raise). C alone gets the error, naming its own row; B gets its rows; the
    reward saw each of B's rows once (a judge is not billed twice)."""
    cfg, log, release = _judge(tmp_path, "      on_failure: raise\n")
    with Server(cfg, "--max-calls", "1") as server:
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            a = pool.submit(server.post, "/score", {"rows": [{"response": "wait"}]})
            wait_for(lambda: server.metric("rewardhub_inflight_batches") == 1, "A's call running")
            b = pool.submit(server.post, "/score", {"rows": [{"response": r} for r in ("b1:0.5", "b2:0.75")]})
            c = pool.submit(server.post, "/score", {"rows": [{"response": r} for r in ("c1:0.25", "raise")]})
            wait_for(lambda: server.metric("rewardhub_inflight_requests") == 3, "B and C waiting")
            release.touch()
            (sa, ba), (sb, bb), (sc, bc) = a.result(), b.result(), c.result()
        assert sa == 200 and ba["rows"][0]["score"] == 1.0
        assert sb == 200 and [r["score"] for r in bb["rows"]] == [0.5, 0.75]
        assert sc == 500 and "boom" in bc["error"] and "on sample 1" in bc["error"], bc
        assert server.metric("rewardhub_batches_total") == 2  # A's call, then B and C pooled
        calls = log.read_text().split()
        assert sorted(calls) == sorted(["wait", "b1:0.5", "b2:0.75", "c1:0.25", "raise"]), calls
        assert server.get("/health")[0] == 200


# ---- (a) a half-sent request and SIGTERM ----------------------------------------------------------
def test_a_half_sent_request_does_not_hold_sigterm(misbehave_cfg):
    """A client sends headers and part of its body, then nothing: SIGTERM ends the server at once
    (it waited the whole --drain-timeout, here 600 s), and a request being scored is still answered."""
    cfg_dir = misbehave_cfg.parent
    hang = cfg_dir / "slow.yaml"
    hang.write_text(MISBEHAVE + "      timeout_s: 2\n")
    server = Server(hang, "--drain-timeout", "600")
    try:
        host, port = server.url.removeprefix("http://").rsplit(":", 1)
        half = socket.create_connection((host, int(port)), timeout=30)
        half.sendall(f"POST /score HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
                     'Content-Length: 100\r\n\r\n{"rows"'.encode())
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            scored = pool.submit(server.post, "/score", {"rows": [{"response": "hang"}]})
            wait_for(lambda: server.metric("rewardhub_inflight_batches") == 1, "the scored request's call")
            server.proc.send_signal(__import__("signal").SIGTERM)
            assert server.proc.wait(60) == 0
            status, body = scored.result()
        assert status == 200 and "timed out after 2s" in body["rows"][0]["errors"]["misbehave"]
        assert half.recv(100) == b""  # the half-sent request's connection was closed, not answered
        half.close()
    finally:
        server.stop()


def test_a_second_sigterm_stops_the_drain_at_once(misbehave_cfg):
    """A reward hangs (no timeout_s) under a 600 s drain: the second SIGTERM ends the server now."""
    server = Server(misbehave_cfg, "--drain-timeout", "600")
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            hung = pool.submit(server.post, "/score", {"rows": [{"response": "hang"}]})
            wait_for(lambda: server.metric("rewardhub_inflight_batches") == 1, "the call hung")
            server.proc.send_signal(__import__("signal").SIGTERM)
            wait_for(lambda: any("draining" in line for line in server.stderr), "the drain to start")
            server.proc.send_signal(__import__("signal").SIGTERM)
            assert server.proc.wait(60) == 1
            status, body = hung.result()
        assert status == 503 and "drain" in body["error"]
        assert "give it one (or allow a longer --drain-timeout)" in "".join(server.stderr)
    finally:
        server.stop()


# ---- (h) a reward that hangs with no timeout_s ------------------------------------------------------
def test_a_reward_hanging_with_no_timeout_shows_in_health_and_sigterm_ends_the_server(misbehave_cfg):
    """Both call slots hold a reward that never returns: /health answers 503 'stuck' with the busy
    calls and for how long (it said ok); SIGTERM ends the server after --drain-timeout (it never
    did), the hung requests and the one waiting behind them get a 503, and the log names the cause."""
    server = Server(misbehave_cfg, "--max-calls", "2", "--stuck-after", "0.5", "--drain-timeout", "2")
    try:
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            hung = []
            for k in (1, 2):  # one after the other: sent together, they could be pooled into one call
                hung.append(pool.submit(server.post, "/score", {"rows": [{"response": "hang"}]}))
                wait_for(lambda: server.metric("rewardhub_inflight_batches") == k, f"call {k} hung")
            waiting = pool.submit(server.post, "/score", {"rows": [{"response": "ok:0.5"}]})
            wait_for(lambda: server.metric("rewardhub_inflight_requests") == 3, "a request waiting")
            wait_for(lambda: server.get("/health")[0] == 503, "/health to say stuck")
            status, health = server.get("/health")
            assert health["status"] == "stuck" and "timeout_s" in health["error"]
            assert len(health["busy_calls"]) == 2 and all(c["seconds"] >= 0.5 for c in health["busy_calls"])
            server.proc.send_signal(__import__("signal").SIGTERM)
            assert server.proc.wait(60) == 1
            answers = [f.result() for f in (*hung, waiting)]
        for status, body in answers:
            assert status == 503 and "drain" in body["error"], body
        log = "".join(server.stderr)
        assert "ERROR: rewardhub serve stopped with 2 Runner call(s) still running" in log
        assert "'misbehave'" in log and "Traceback" not in log
    finally:
        server.stop()


# ---- (b) connections that never finish their headers -------------------------------------------
def test_connections_that_never_send_their_headers_do_not_shut_others_out(misbehave_cfg):
    """With 512 files allowed (a small `ulimit -n`), 600 connections that send half a request line
    and stop: every accept() failed once the descriptors ran out, no client was served, and asyncio
    logged a traceback per try. Now the newest connections take the places of those idle longest,
    a client that sends its request at once is answered, and the log holds one line."""
    with Server(misbehave_cfg, open_files=512) as server:
        host, port = server.url.removeprefix("http://").rsplit(":", 1)
        idle = []
        try:
            for _ in range(600):
                c = socket.create_connection((host, int(port)), timeout=30)
                c.sendall(f"POST /score HTTP/1.1\r\nHost: {host}:{port}\r\n".encode())
                idle.append(c)
            status, body = server.post("/score", {"rows": [{"response": "ok:0.5"}]}, timeout=30)
            assert status == 200 and body["rows"][0]["score"] == 0.5
            # 512 files: 128 for everything else and 3 backlogs of 128 in flight leave none, so the floor, 8
            closed = server.metric('rewardhub_connections_closed_total{reason="limit"}')
            assert closed >= 600 + 1 - 8
            assert server.metric("rewardhub_open_connections") <= 8
        finally:
            for c in idle:
                c.close()
    log = "".join(server.stderr)
    assert "Traceback" not in log and "Too many open files" not in log
    assert log.count("WARNING: closed connections that did not send") == 1


def test_a_connection_that_does_not_finish_its_headers_is_closed_after_the_read_timeout(misbehave_cfg):
    with Server(misbehave_cfg, "--read-timeout", "1") as server:
        host, port = server.url.removeprefix("http://").rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=30) as slow:
            slow.sendall(f"POST /score HTTP/1.1\r\nHost: {host}:{port}\r\n".encode())
            assert slow.recv(100) == b""  # closed by the server (the recv would time out after 30 s)
        assert server.metric('rewardhub_connections_closed_total{reason="header_timeout"}') == 1
        # a body that stops coming is answered 408
        with socket.create_connection((host, int(port)), timeout=30) as slow:
            slow.sendall(f"POST /score HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
                         'Content-Length: 100\r\n\r\n{"rows"'.encode())
            head = slow.recv(65536)
        assert head.startswith(b"HTTP/1.1 408"), head
        assert b"did not arrive within 1s (--read-timeout)" in head or b"--read-timeout" in head
        status, body = server.post("/score", {"rows": [{"response": "ok:0.5"}]})
        assert status == 200


@pytest.mark.timeout(60)
def test_the_connection_limit_leaves_three_backlogs_in_flight_and_a_quarter_of_the_files():
    """A full run on a loaded host: the server ran out of descriptors at its limit, which left room for
    one backlog of connections accepted and not yet at the gate, where three can be."""
    import functools
    import subprocess
    import sys

    from serve_process import _limit_files

    code = "from rewardhub.server._conns import connection_limit as f; print(f(1024), f(100000))"
    for files, want in ((512, "8 8"), (4096, f"1024 {4096 - 1024 - 3 * 128}")):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=50,
                             preexec_fn=functools.partial(_limit_files, files))
        assert out.stdout.split() == want.split(), out.stderr
