"""`rewardhub serve` as a separate process, called over real HTTP: equal to `rewardhub score`, OpenRLHF's
own client, concurrent clients, hanging rewards, bad requests, the token, and SIGTERM."""

from __future__ import annotations

import concurrent.futures
import json
import os
import sys
import threading
import types
from pathlib import Path

import pytest
from serve_process import Server
from serve_process import wait_for

pytest.importorskip("aiohttp")

REPO = Path(__file__).resolve().parent.parent
EXAMPLE_CFG = REPO / "examples" / "score.yaml"
EXAMPLE_DATA = REPO / "examples" / "math_samples.jsonl"
OPENRLHF = REPO / ".venv" / "openrlhf-compat"

HANG_CFG = """\
reward:
  rewards:
    - module: rewards_for_tests
      function: misbehave
      timeout_s: {timeout}
"""


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def example_server():
    with Server(EXAMPLE_CFG) as server:
        yield server


def test_own_api_equals_rewardhub_score(example_server, cli, tmp_path):
    out = tmp_path / "scored.jsonl"
    res = cli("score", str(EXAMPLE_CFG), str(EXAMPLE_DATA), "-o", str(out))
    assert res.returncode == 0, res.stderr
    expected = _rows(out)
    inputs = _rows(EXAMPLE_DATA)
    got = []
    for k in range(0, len(inputs), 64):  # batches of 64, as a trainer sends them
        status, body = example_server.post("/score", {"rows": inputs[k:k + 64]})
        assert status == 200, body
        got.extend(body["rows"])
    assert got == expected
    assert {r["score"] for r in got} >= {0.0, 1.1}  # right and wrong answers both there
    # OpenRLHF's protocol scores the same rows the same (query = prompt + response, label = ground truth)
    status, body = example_server.post("/get_reward", {
        "query": [r["prompt"] + r["response"] for r in inputs[:64]],
        "prompts": [r["prompt"] for r in inputs[:64]],
        "labels": [r["ground_truth"] for r in inputs[:64]]})
    assert status == 200, body
    assert body["rewards"] == body["scores"] == [r["score"] for r in expected[:64]]
    assert body["extra_logs"]["math_verify"] == [r["rewards"]["math_verify"] for r in expected[:64]]


def _openrlhf_agent():
    """OpenRLHF's own ``openrlhf/utils/agent.py`` (0.11.2), imported from the installed wheel's files.

    Its package ``__init__`` files import torch, deepspeed, pylatexenc & co.; the client needs none of
    them (aiohttp only), so the two packages are made as empty modules pointing at the real folders
    and the real ``utils/agent.py`` and ``utils/logging_utils.py`` load from them unchanged.
    """
    if not (OPENRLHF / "openrlhf" / "utils" / "agent.py").exists():
        pytest.skip("OpenRLHF is not installed for the tests (make install puts it in .venv/openrlhf-compat)")
    import importlib

    saved = {k: sys.modules.get(k) for k in ("openrlhf", "openrlhf.utils")}
    for name, folder in (
        ("openrlhf", OPENRLHF / "openrlhf"),
        ("openrlhf.utils", OPENRLHF / "openrlhf" / "utils"),
    ):
        mod = types.ModuleType(name)
        mod.__path__ = [str(folder)]
        sys.modules[name] = mod
    try:
        return importlib.import_module("openrlhf.utils.agent")
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)


def test_openrlhf_client_reads_the_answer(example_server):
    import asyncio

    agent = _openrlhf_agent()
    executor = agent.SingleTurnAgentExecutor(example_server.url + "/get_reward")
    inputs = _rows(EXAMPLE_DATA)[:6]
    queries = [r["prompt"] + r["response"] for r in inputs]
    prompts = [r["prompt"] for r in inputs]
    labels = [r["ground_truth"] for r in inputs]
    answers = asyncio.run(executor._fetch_rewards_via_http(queries, prompts, labels))
    _, mine = example_server.post("/score", {"rows": inputs})
    assert answers[0]["rewards"] == [r["score"] for r in mine["rows"]]
    assert answers[0]["scores"] == answers[0]["rewards"]
    assert set(answers[0]["extra_logs"]) == {"math_verify", "boxed_format", "rewardhub_failed"}


def test_eight_concurrent_clients(example_server):
    inputs = _rows(EXAMPLE_DATA)
    _, whole = example_server.post("/score", {"rows": inputs})
    expected = [r["score"] for r in whole["rows"]]
    before = example_server.metric("rewardhub_rows_total")
    start = threading.Barrier(8)

    def client(c: int) -> list[tuple[int, list]]:
        start.wait()
        out = []
        for k in range(4):
            lo = (c * 4 + k) * 6
            status, body = example_server.post("/score", {"rows": inputs[lo:lo + 6]})
            out.append((lo, [r["score"] for r in body["rows"]] if status == 200 else body))
        return out

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = [r for f in [pool.submit(client, c) for c in range(8)] for r in f.result()]
    assert len(results) == 32
    for lo, scores in results:
        assert scores == expected[lo:lo + 6]
    assert example_server.metric("rewardhub_rows_total") - before == 8 * 4 * 6
    assert example_server.get("/health")[0] == 200


def test_bad_requests_get_4xx_and_the_server_stays(tmp_path):
    with Server(EXAMPLE_CFG, "--max-rows", "8", "--max-body-mb", "0.01") as server:
        cases = [
            (server.request("POST", "/score", raw=b"{not json"), 400, "not JSON"),
            (server.request("POST", "/score", raw=b"\xff\xfe"), 400, "UTF-8"),
            (server.post("/score", {"rows": [{"prompt": "p"}]}), 400, "rows[0] has no 'response'"),
            (server.post("/score", {"rows": [{"response": 3}]}), 400, "not a string"),
            (server.post("/score", {"rows": [{"response": "x", "score": 1}]}), 400, "'score'"),
            (server.post("/score", {"rows": []}), 400, "no rows"),
            (server.post("/score", {"rows": [{"response": "x"}] * 9}), 413, "limit of 8"),
            (server.post("/score", {"rows": [{"response": "x" * 20000}]}), 413, "larger than"),
            (server.post("/get_reward", {"query": ["a"], "prompts": ["a", "b"]}), 400, "as long as 'query'"),
            (server.post("/get_reward", {"queries": ["a"]}), 400, "OpenRLHF"),
            (server.get("/nowhere"), 404, "Not Found"),
        ]
        for (status, body), want_status, want in cases:
            assert status == want_status, body
            assert want in body["error"], body
        status, body = server.post("/score", {"rows": [{"response": "42", "ground_truth": "42"}]})
        assert status == 200 and body["rows"][0]["rewards"]["math_verify"] == 1.0
        # a row with no ground truth: scored as `rewardhub score` does (an error for the term that needs one)
        status, body = server.post("/score", {"rows": [{"response": "42"}]})
        assert status == 200 and "no ground truth" in body["rows"][0]["errors"]["math_verify"]
        assert server.metric('rewardhub_requests_total{endpoint="/score",code="400"}') == 6
        assert server.proc.poll() is None
    assert server.proc.returncode == 0


def test_token_and_host(tmp_path, cli):
    with Server(EXAMPLE_CFG, env={"REWARDHUB_SERVE_TOKEN": "s3cret"}) as server:
        row = {"rows": [{"response": "1", "ground_truth": "1"}]}
        assert server.post("/score", row, token="wrong")[0] == 401
        assert server.request("POST", "/score", row, token="")[0] == 401
        status, body = server.post("/score", row)
        assert status == 200 and body["rows"][0]["score"] == 1.0
        assert server.get("/health", token="wrong")[0] == 200  # liveness needs no token
        assert server.get("/metrics", token="wrong")[0] == 401
    env = {k: v for k, v in os.environ.items() if k != "REWARDHUB_SERVE_TOKEN"}
    res = cli(
        "serve",
        str(EXAMPLE_CFG),
        "--host",
        "0.0.0.0",
        "--port",
        "0",
        env={**env, "REWARDHUB_SERVE_TOKEN": ""},
    )
    assert res.returncode == 2
    assert res.stderr.startswith(
        "ERROR: --host 0.0.0.0 listens beyond this machine, and $REWARDHUB_SERVE_TOKEN"
    )


def test_hanging_reward_times_out_per_row_while_others_are_served(tmp_path):
    """A's row hangs until its timeout_s; four requests sent while A is in flight are answered before
    A (their Runner calls run beside A's), and A's hanging row gets its timeout result. The timeout is
    wide (15 s) because the four answers must come inside it on a loaded 2-core CI host, where each
    Runner call may start a pool worker; idle they take well under a second."""
    cfg = tmp_path / "hang.yaml"
    cfg.write_text(HANG_CFG.format(timeout=15))
    with Server(cfg) as server:
        slow: dict = {}
        a_done = threading.Event()

        def post_a() -> None:
            slow["r"] = server.post("/score", {"rows": [{"response": "hang"}, {"response": "ok:0.5"}]})
            a_done.set()

        t = threading.Thread(target=post_a)
        t.start()
        wait_for(lambda: server.metric("rewardhub_inflight_batches") == 1, "A's Runner call running")
        assert server.get("/health")[0] == 200  # the event loop answers while a reward hangs
        bodies = [{"rows": [{"response": f"ok:0.{k}"}, {"response": "raise"}]} for k in range(1, 5)]
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(lambda b: server.post("/score", b), bodies))
        assert not a_done.is_set(), "the other requests waited for the hanging one"
        for k, (status, body) in enumerate(answers, 1):
            assert status == 200
            assert [r["score"] for r in body["rows"]] == [k / 10, None]  # on_failure nan: null in JSON
            assert body["rows"][1]["rewards"] == {"misbehave": None}
            assert "boom" in body["rows"][1]["errors"]["misbehave"]
        t.join(60)
        status, body = slow["r"]
        assert status == 200
        hang, ok = body["rows"]
        assert ok["score"] == 0.5 and "errors" not in ok
        assert hang["score"] is None and "timed out after 15s" in hang["errors"]["misbehave"]
        assert server.metric("rewardhub_inflight_batches") == 0
        assert server.metric('rewardhub_reward_timeouts_total{reward="misbehave"}') == 1
        assert server.metric('rewardhub_reward_errors_total{reward="misbehave"}') == 4
        assert server.metric('rewardhub_reward_samples_total{reward="misbehave"}') == 10


def test_requests_waiting_while_every_call_is_busy_are_pooled_into_one(tmp_path, cli):
    """--max-calls 2: A and B hang in the two calls; C..F arrive meanwhile and wait; the first call
    that frees takes all four into ONE Runner call (pooled, not one by one)."""
    cfg = tmp_path / "hang.yaml"
    cfg.write_text(HANG_CFG.format(timeout=3))
    with Server(cfg, "--max-calls", "2") as server:
        assert server.get("/health")[1]["max_calls"] == 2
        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            a = pool.submit(server.post, "/score", {"rows": [{"response": "hang"}]})
            wait_for(lambda: server.metric("rewardhub_inflight_batches") == 1, "A's call running")
            b = pool.submit(server.post, "/score", {"rows": [{"response": "hang"}]})
            wait_for(lambda: server.metric("rewardhub_inflight_batches") == 2, "B's call running")
            rest = [
                pool.submit(server.post, "/score", {"rows": [{"response": f"ok:0.{k}"}]}) for k in range(1, 5)
            ]
            wait_for(lambda: server.metric("rewardhub_inflight_requests") == 6, "C..F waiting")
            assert server.metric("rewardhub_inflight_batches") == 2  # no third call
            for k, f in enumerate(rest, 1):
                status, body = f.result()
                assert status == 200 and body["rows"][0]["score"] == k / 10
            for f in (a, b):
                status, body = f.result()
                assert status == 200 and "timed out" in body["rows"][0]["errors"]["misbehave"]
        assert server.metric("rewardhub_batches_total") == 3  # A's, B's, then C..F pooled
    res = cli("serve", str(cfg), "--max-calls", "0")
    assert res.returncode == 2 and res.stderr.startswith("ERROR: --max-calls 0 must be above 0")


def test_failed_rows_are_null_in_both_protocols(tmp_path):
    """on_failure nan (the default): a failed row's score is NaN in the core; the own API writes it
    null (strict JSON); OpenRLHF's /get_reward gives null rewards and flags the row in extra_logs
    (numbers only), and OpenRLHF's own client reads that answer; on_failure zero gives 0.0."""
    cfg = tmp_path / "fail.yaml"
    cfg.write_text(HANG_CFG.format(timeout=30))
    zero = tmp_path / "zero.yaml"
    zero.write_text(HANG_CFG.format(timeout=30) + "      on_failure: zero\n")
    rows = [{"response": "ok:0.5"}, {"response": "raise"}, {"response": "nan"}, {"response": "dict"}]
    with Server(cfg) as server:
        status, body = server.post("/score", {"rows": rows})  # parsed strictly: NaN would raise
        assert status == 200
        assert [r["score"] for r in body["rows"]] == [0.5, None, None, 0.25]
        assert [sorted(r.get("errors", {})) for r in body["rows"]] == [[], ["misbehave"], ["misbehave"], []]
        query = {"query": ["Q: ok:0.5", "Q: raise", "Q: nan"], "prompts": ["Q: "] * 3, "labels": [None] * 3}
        status, ans = server.post("/get_reward", query)
        assert status == 200
        assert ans["rewards"] == ans["scores"] == [0.5, None, None]
        assert ans["extra_logs"] == {"misbehave": [0.5, 0.0, 0.0], "rewardhub_failed": [0.0, 1.0, 1.0]}
        if (OPENRLHF / "openrlhf" / "utils" / "agent.py").exists():
            import asyncio

            executor = _openrlhf_agent().SingleTurnAgentExecutor(server.url + "/get_reward")
            got = asyncio.run(
                executor._fetch_rewards_via_http(query["query"], query["prompts"], query["labels"])
            )
            assert got == [ans]
    with Server(zero) as server:
        status, ans = server.post("/get_reward", {"query": ["ok:0.5", "raise"]})
        assert status == 200
        assert ans["rewards"] == [0.5, 0.0]
        assert ans["extra_logs"]["rewardhub_failed"] == [0.0, 1.0]


def test_sigterm_drains_requests_in_flight(tmp_path):
    cfg = tmp_path / "hang.yaml"
    cfg.write_text(HANG_CFG.format(timeout=2))
    server = Server(cfg)
    try:
        slow: dict = {}
        t = threading.Thread(
            target=lambda: slow.update(r=server.post("/score", {"rows": [{"response": "hang"}]}))
        )
        t.start()
        wait_for(lambda: server.metric("rewardhub_inflight_requests") >= 1, "the request in flight")
        server.proc.send_signal(__import__("signal").SIGTERM)
        wait_for(lambda: any("draining" in line for line in server.stderr), "the server to start draining")
        with pytest.raises(OSError):  # no longer listening
            server.get("/health", timeout=5)
        t.join(60)
        status, body = slow["r"]
        assert status == 200 and "timed out" in body["rows"][0]["errors"]["misbehave"]
        assert server.proc.wait(60) == 0
    finally:
        server.stop()


def test_on_failure_raise_fails_only_the_request_whose_row_raised(tmp_path):
    """B and C arrive while A hangs in the one Runner call (--max-calls 1), and are pooled into the
    next; C's row raises (on_failure: raise), so that call fails: each is scored again alone, and
    only C gets the error."""
    cfg = tmp_path / "raise.yaml"
    cfg.write_text(HANG_CFG.format(timeout=4) + "      on_failure: raise\n")
    with Server(cfg, "--max-calls", "1") as server:
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            a = pool.submit(server.post, "/score", {"rows": [{"response": "hang"}]})
            wait_for(lambda: server.metric("rewardhub_inflight_requests") >= 1, "A in flight")
            b = pool.submit(server.post, "/score", {"rows": [{"response": "ok:0.5"}]})
            c = pool.submit(server.post, "/score", {"rows": [{"response": "ok:0.25"}, {"response": "raise"}]})
            wait_for(lambda: server.metric("rewardhub_inflight_requests") == 3, "B and C waiting")
            (sa, ba), (sb, bb), (sc, bc) = a.result(), b.result(), c.result()
        assert sa == 500 and "timed out" in ba["error"] and "on_failure: raise" in ba["error"]
        assert sb == 200 and bb["rows"][0]["score"] == 0.5
        assert sc == 500 and "boom" in bc["error"]
        assert server.metric("rewardhub_batch_failures_total") == 2  # A's, and B+C's pooled call
        assert server.get("/health")[0] == 200
