"""The SandboxFusion client against a local server that speaks its API and really runs the code."""

from __future__ import annotations

import socket
from concurrent.futures import ThreadPoolExecutor

import pytest
from code_tasks import TASKS
from code_tasks import fenced
from fake_sandbox_fusion import FakeSandboxFusion
from rewardhub_code._remote import endpoint
from rewardhub_code.reward import SandboxUnavailableError
from rewardhub_code.reward import code_io
from rewardhub_code.reward import code_tests

from rewardhub.errors import UsageError

ADD = fenced("def add(a, b):\n    return a + b")
TESTS = ["assert add(2, 3) == 5", "assert add(-1, 1) == 0"]


def test_endpoint_rules():
    assert endpoint("http://h:8080") == "http://h:8080/run_code"
    assert endpoint("http://h:8080/") == "http://h:8080/run_code"
    assert endpoint("https://gw.example.com/run_code") == "https://gw.example.com/run_code"


def test_scores_through_the_server_with_its_request_shape():
    with FakeSandboxFusion() as srv:
        sb = {"url": srv.url, "memory_limit_mb": 256, "timeout_s": 3}
        out = code_tests(response=ADD, ground_truth=TESTS, sandbox=sb)
        assert out["score"] == 1.0 and out["backend"] == "remote"
        wrong = code_tests(
            response=fenced("def add(a, b):\n    return a * b"), ground_truth=TESTS, sandbox=sb
        )
        assert wrong["score"] == 0.0 and wrong["error"] == "wrong_answer"
    req = srv.requests[0]
    assert srv.paths == ["/run_code", "/run_code"]
    assert req["language"] == "python" and req["memory_limit_MB"] == 256 and req["run_timeout"] == 3
    assert set(req) >= {"code", "stdin", "compile_timeout", "files"}


def test_some_real_tasks_remotely():
    with FakeSandboxFusion() as srv:
        for name, gt, good, bad in TASKS[::4]:
            assert (
                code_tests(response=fenced(good), ground_truth=gt, sandbox={"url": srv.url})["score"] == 1.0
            ), name
            assert code_tests(response=fenced(bad), ground_truth=gt, sandbox={"url": srv.url},
                              all_or_nothing=True)["score"] == 0.0, name


def test_memory_limit_is_sent_and_holds():
    with FakeSandboxFusion() as srv:
        out = code_tests(response=fenced("x = bytearray(1 << 30)\ndef add(a, b):\n    return a + b"),
                         ground_truth=TESTS, sandbox={"url": srv.url, "memory_limit_mb": 256})
    assert out["score"] == 0.0 and out["error"] == "memory"
    assert srv.requests[0]["memory_limit_MB"] == 256


def test_remote_timeout_is_reported():
    with FakeSandboxFusion() as srv:
        out = code_io(
            response=fenced("import time\ntime.sleep(30)"),
            ground_truth={"inputs": [""], "outputs": [""]},
            sandbox={"url": srv.url, "timeout_s": 1},
        )
    assert out["score"] == 0.0 and out["timed_out"] == 1 and out["error"] == "timeout"


def test_max_concurrent_bounds_requests_in_flight():
    with FakeSandboxFusion(delay_s=0.3) as srv:
        sb = {"url": srv.url, "max_concurrent": 2}
        with ThreadPoolExecutor(8) as ex:
            outs = list(ex.map(lambda _: code_tests(response=ADD, ground_truth=TESTS, sandbox=sb), range(8)))
    assert [o["score"] for o in outs] == [1.0] * 8
    # never more than max_concurrent, and the bound was reached (the server counts a request from its
    # arrival until its answer is ready, a span inside the client's hold of its slot)
    assert srv.peak == 2


def test_http_errors_and_sandbox_errors_are_retried():
    with FakeSandboxFusion(http_errors=2) as srv:
        assert (
            code_tests(response=ADD, ground_truth=TESTS, sandbox={"url": srv.url, "retries": 2})["score"]
            == 1.0
        )
    assert len(srv.requests) == 3
    with FakeSandboxFusion(sandbox_errors=1) as srv:
        assert code_tests(response=ADD, ground_truth=TESTS, sandbox={"url": srv.url})["score"] == 1.0
    assert len(srv.requests) == 2


def test_giving_up_after_the_retries_is_a_sandbox_failure_not_a_zero():
    with FakeSandboxFusion(http_errors=10) as srv:
        with pytest.raises(SandboxUnavailableError, match="HTTP 503 \\(after 2 attempts\\)"):
            code_tests(response=ADD, ground_truth=TESTS, sandbox={"url": srv.url, "retries": 1})
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    with pytest.raises(SandboxUnavailableError, match=f"127.0.0.1:{port}/run_code: .*Connection refused"):
        code_tests(
            response=ADD, ground_truth=TESTS, sandbox={"url": f"http://127.0.0.1:{port}", "retries": 1}
        )


def test_a_wrong_path_is_a_clear_error():
    with FakeSandboxFusion() as srv:
        with pytest.raises(UsageError, match="(?s)rejected the request: HTTP 404.*check reward.sandbox.url"):
            code_tests(response=ADD, ground_truth=TESTS, sandbox={"url": srv.url + "/v1/run"})
