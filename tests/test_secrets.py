"""No secret written (issue 42 §4): a judge key cut in two by an error's length limit, a key pasted into
``api_key_env``, and a ``rewardhub serve`` token a server or proxy echoes, never reach a row, the
summary or stderr. Real `rewardhub score` runs against a real aiohttp judge stub and a real HTTP server."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from judge_stub import StubJudge

from rewardhub._secrets import looks_like_key
from rewardhub._secrets import redact

KEY = "sk-proj-Zq81bXc7TtW0mLr5NvYd2KpA9s"  # 34 characters
TOKEN = "serve-tok-3f9a77c1d2e84b6a90c5e1f2"


def pieces(secret: str, size: int = 8) -> list[str]:
    """Every run of ``size`` characters of ``secret``: none may be found anywhere written."""
    return [secret[k:k + size] for k in range(len(secret) - size + 1)]


def leaked(secret: str, *texts: str) -> list[str]:
    return [p for p in pieces(secret) for t in texts if p in t]


@pytest.fixture(scope="module")
def stub() -> Iterator[StubJudge]:
    server = StubJudge()
    yield server
    server.close()


def _score(cli, tmp_path: Path, term: dict[str, object], env: dict[str, str]) -> tuple[object, str]:
    (tmp_path / "cfg.json").write_text(json.dumps({"reward": {"rewards": [term]}}))
    (tmp_path / "data.jsonl").write_text("".join(json.dumps({"prompt": "p", "response": r}) + "\n"
                                                for r in ("a", "b")))
    res = cli("score", str(tmp_path / "cfg.json"), str(tmp_path / "data.jsonl"), "-o",
              str(tmp_path / "out.jsonl"), "--summary-json", str(tmp_path / "summary.json"), "--no-progress",
              env=env)
    files = (tmp_path / "out.jsonl", tmp_path / "summary.json")
    written = "".join(p.read_text() for p in files if p.exists())
    return res, written


@pytest.mark.timeout(180)
@pytest.mark.parametrize("cut_at", [270, 280, 288])
def test_a_judge_key_cut_by_the_error_limit_is_still_redacted(cli, stub, tmp_path, cut_at):
    """The judge's 401 echoes the key where the 300-character cut splits it (no `Bearer` before it)."""
    stub.reset(lambda body, n: (401, "x" * cut_at + " key=" + KEY + " refused"))
    term = {"name": "llm_judge", "kwargs": {"base_url": stub.url, "model": "m", "api_key_env": "MY_JUDGE_KEY",
                                            "retries": 0}}
    res, written = _score(cli, tmp_path, term, {"MY_JUDGE_KEY": KEY})
    assert "HTTP 401" in written
    assert leaked(KEY, written, res.stdout, res.stderr) == []


@pytest.mark.timeout(180)
def test_a_key_pasted_into_api_key_env_is_refused_and_never_shown(cli, stub, tmp_path):
    stub.reset(lambda body, n: (200, "Score: 5"))
    term = {"name": "llm_judge", "kwargs": {"base_url": stub.url, "model": "m", "api_key_env": KEY}}
    res, written = _score(cli, tmp_path, term, {})
    assert res.returncode == 2 and "looks like an API key itself (34 characters)" in res.stderr
    assert leaked(KEY, written, res.stdout, res.stderr) == []
    assert not stub.requests


class _Echo(http.server.BaseHTTPRequestHandler):
    """A server (or proxy) that echoes the request's Authorization header: 503 twice (JSON), then 401 with
    plain text that puts the token where the client cuts a raw reason (200 characters)."""

    calls = 0

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        type(self).calls += 1
        auth = self.headers.get("Authorization", "")
        if type(self).calls <= 2:
            status, body = 503, json.dumps({"error": f"upstream refused headers: Authorization: {auth}"})
        else:
            status, body = 401, "y" * 180 + " token " + auth.split()[-1] + " is not known"
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.timeout(180)
def test_a_server_echoing_the_serve_token_does_not_put_it_on_stderr(cli, tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        remote = {"url": url, "retry_for_s": 30}
        (tmp_path / "cfg.json").write_text(json.dumps({"reward": {"remote": remote}}))
        (tmp_path / "data.jsonl").write_text(json.dumps({"prompt": "p", "response": "a"}) + "\n")
        res = cli("score", str(tmp_path / "cfg.json"), str(tmp_path / "data.jsonl"), "--no-progress",
                  env={"REWARDHUB_SERVE_TOKEN": TOKEN})
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
    assert res.returncode != 0 and "answered 401" in res.stderr, res.stderr
    assert "<serve token>" in res.stderr and "503" in res.stderr
    assert leaked(TOKEN, res.stdout, res.stderr) == []


def test_redact_takes_out_whole_keys_cut_pieces_and_any_bearer_token():
    assert redact(f"a {KEY} b", [KEY]) == "a <redacted> b"
    assert redact(("z" * 5 + KEY)[:20], [KEY]) == "zzzzz<redacted>"  # a head left by a cut
    assert redact(KEY[-9:] + " rest", [KEY]) == "<redacted> rest"  # a tail
    assert redact("Authorization: Bearer other-token-123", []) == "Authorization: Bearer <redacted>"
    assert redact("score 12345", [KEY]) == "score 12345"


@pytest.mark.parametrize("value,key", [("OPENAI_API_KEY", False), ("JUDGE_KEY_2", False),
                                       ("judge_key", False), (KEY, True), ("a3f9" * 10, True),
                                       ("sk_live_51Habc123def456ghi", True),
                                       ("MY KEY", True), ("", True)])
def test_looks_like_key(value, key):
    assert looks_like_key(value) is key
