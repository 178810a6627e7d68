"""``rewardhub serve`` reads only JSON, and answers what it cannot read with a clear 4xx and a quiet log:
tokens JSON does not have (``NaN``, ``Infinity``, ``1e400``), a key given twice, bodies nested past
the recursion limit, integers past the digit limit, request heads aiohttp refuses, and start-up flags
that are not finite numbers. Each against a real server process on 127.0.0.1."""

from __future__ import annotations

import socket

import pytest
from serve_process import Server
from serve_process import wait_for

pytest.importorskip("aiohttp")

MISBEHAVE = """\
reward:
  rewards:
    - module: rewards_for_tests
      function: misbehave
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    cfg = tmp_path_factory.mktemp("serve") / "misbehave.yaml"
    cfg.write_text(MISBEHAVE)
    with Server(cfg) as s:
        yield s


def _row(extra: bytes) -> bytes:
    return b'{"rows": [{"response": "ok:0.5", "extra_info": {"x": ' + extra + b"}}]}"


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("body", "named"), [
    (_row(b"NaN"), "NaN is not a JSON number"),
    (_row(b"Infinity"), "Infinity is not a JSON number"),
    (_row(b"-Infinity"), "-Infinity is not a JSON number"),
    (_row(b"[1, NaN]"), "NaN is not a JSON number"),
    (_row(b"1e400"), "1e400 is beyond the range of a float"),
    (_row(b"-1e400"), "-1e400 is beyond the range of a float"),
    (b'{"rows": [{"response": "ok:0.5", "response": "ok:1"}]}', "the key 'response' appears twice"),
    (_row(b'{"a": 1, "a": 2}'), "the key 'a' appears twice"),
    (_row(b"1" * 5000), "an integer longer than the 4300 digits"),
    (_row(b"-" + b"1" * 5000), "an integer longer than the 4300 digits"),
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    (_row(b"[" * 5000 + b"]" * 5000), "nested too deeply"),
])
def test_what_json_does_not_allow_is_a_400_naming_it(server, body, named):
    status, answer = server.post("/score", None, raw=body)
    assert status == 400, answer
    assert answer["error"].startswith("the request body is "), answer
    assert named in answer["error"], answer
    status, answer = server.post("/get_reward", None, raw=body)
    assert status == 400 and named in answer["error"], answer


@pytest.mark.timeout(300)
def test_json_at_the_edges_is_still_scored(server):
    """What JSON allows stays allowed: 1e308, a 4,000-digit integer, -0, nesting 200 deep."""
    body = _row(b'[1e308, -1e308, 5e-324, -0, ' + b"9" * 4000 + b", " + b"[" * 200 + b"]" * 200 + b"]")
    status, answer = server.post("/score", None, raw=body)
    assert status == 200 and answer["rows"][0]["score"] == 0.5, answer
    assert 'code="500"' not in server.get("/metrics")[1]


def _head(server: Server, head: bytes) -> bytes:
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    body = b'{"rows": [{"response": "ok:0.5"}]}'
    with socket.create_connection((host, int(port)), timeout=60) as s:
        s.sendall(head + b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


@pytest.mark.timeout(300)
def test_heads_aiohttp_refuses_are_a_400_without_a_traceback(server):
    host = server.url.removeprefix("http://")
    start = f"POST /score HTTP/1.1\r\nHost: {host}\r\n".encode()
    long_line = start + b"X-Long: " + b"a" * 100_000 + b"\r\n"
    many = start + b"".join(b"X-H%d: a\r\n" % i for i in range(20_000))
    long_url = f"POST /{'a' * 10_000} HTTP/1.1\r\nHost: {host}\r\n".encode()
    for head in (long_line, many, long_url):
        answer = _head(server, head)
        assert answer.split(b"\r\n", 1)[0].split()[1] in (b"400", b"431"), answer[:200]
    wait_for(lambda: any("whose head could not be read" in line for line in server.stderr),
             "the warning about the refused heads")
    assert server.metric('rewardhub_connections_closed_total{reason="bad_request"}') == 3
    assert not any("Traceback" in line for line in server.stderr), "".join(server.stderr)
    assert sum("whose head could not be read" in line for line in server.stderr) == 1  # once a minute
    assert server.post("/score", {"rows": [{"response": "ok:0.5"}]})[0] == 200


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("flag", "value"), [("--max-body-mb", "nan"), ("--max-body-mb", "inf"),
                                             ("--drain-timeout", "nan"), ("--read-timeout", "inf"),
                                             ("--stuck-after", "-inf")])
def test_flags_that_are_not_finite_are_refused_at_start(cli, tmp_path, flag, value):
    cfg = tmp_path / "misbehave.yaml"
    cfg.write_text(MISBEHAVE)
    res = cli("serve", str(cfg), "--port", "0", f"{flag}={value}", timeout=60)
    assert res.returncode == 2, res.stderr
    assert res.stderr.startswith(f"ERROR: {flag} {value} is not a number of "), res.stderr
    assert "Traceback" not in res.stderr


# ---- the bytes of the bodies held at once ---------------------------------------------------------
WAITER = """\
import os
import time


def waiter(*, response, **kwargs):
    while response == "wait" and not os.path.exists({release!r}):
        time.sleep(0.02)
    return float(len(response))
"""


def _status_and_headers(server: Server, body: bytes) -> tuple[int, dict[str, str], dict]:
    import json
    import urllib.error
    import urllib.request

    req = urllib.request.Request(server.url + "/score", data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return resp.status, dict(resp.headers), json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), json.loads(exc.read())


@pytest.mark.timeout(300)
def test_bodies_past_the_waiting_limit_get_a_503_with_retry_after(tmp_path):
    """A busy server (its one call held) holds the bodies of the requests waiting; past
    --max-waiting-mb the next is answered 503 with Retry-After before its body is read, and is served
    once the others are answered. Before: every body was read and held, without bound."""
    import concurrent.futures
    import json

    release = tmp_path / "release"
    (tmp_path / "waiter.py").write_text(WAITER.format(release=str(release)))
    cfg = tmp_path / "waiter.yaml"
    cfg.write_text(f"reward:\n  rewards:\n    - path: {tmp_path / 'waiter.py'}\n      function: waiter\n")
    big = json.dumps({"rows": [{"response": "x" * 1000}] * 1500}).encode()  # ~1.5 MB
    with Server(cfg, "--max-calls", "1", "--max-waiting-mb", "4") as server:
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            a = pool.submit(server.post, "/score", {"rows": [{"response": "wait"}]})
            wait_for(lambda: server.metric("rewardhub_inflight_batches") == 1, "A's call running")
            b = pool.submit(_status_and_headers, server, big)
            c = pool.submit(_status_and_headers, server, big)
            wait_for(lambda: server.metric("rewardhub_inflight_requests") == 3, "B and C waiting")
            status, headers, answer = _status_and_headers(server, big)
            assert status == 503, answer
            assert headers.get("Retry-After") == "2"
            assert "--max-waiting-mb" in answer["error"], answer
            health = server.get("/health")[1]
            assert health["refused_busy"] == 1 and health["held_body_bytes"] > 2 * len(big), health
            release.touch()
            assert a.result()[0] == 200
            assert [f.result()[0] for f in (b, c)] == [200, 200]
        status, _, answer = _status_and_headers(server, big)
        assert status == 200 and answer["rows"][0]["score"] == 1000.0
        assert server.get("/health")[1]["held_body_bytes"] == 0
