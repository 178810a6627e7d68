"""The judge as a new user first runs it (issue 43 §6): an endpoint where nothing listens asks whether the
server runs there; ``check`` catches an unset key variable and a missing aiohttp before any call;
``bench/bench_judge.py`` reports no rate when every reply failed."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest
from judge_stub import StubJudge

from rewardhub.execution import Runner

REPO = Path(__file__).resolve().parent.parent


def _closed_port() -> int:
    with socket.socket() as s:  # bound then closed: nothing listens there
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.timeout(120)
def test_an_unreachable_judge_asks_whether_the_server_runs():
    base = f"http://127.0.0.1:{_closed_port()}/v1"
    kwargs = {"base_url": base, "model": "judge", "retries": 1, "backoff_s": 0.01}
    term = {"name": "llm_judge", "kwargs": kwargs}
    with Runner.from_config({"rewards": [term]}) as runner:
        res = runner.score([{"prompt": "2+2?", "response": "4", "ground_truth": "4"}])
    error = res.errors[0]["llm_judge"]
    assert f"is the server running at {base}?" in error, error
    assert "raise kwargs.retries" not in error


def _config(tmp_path: Path, kwargs: str) -> str:
    path = tmp_path / "judge.yaml"
    path.write_text("reward:\n  rewards:\n    - name: llm_judge\n"
                    f"      kwargs: {{base_url: 'http://127.0.0.1:8000/v1', model: judge{kwargs}}}\n")
    return str(path)


def test_check_catches_an_unset_key_variable(tmp_path, monkeypatch):
    from rewardhub._commands.check import check_config

    monkeypatch.delenv("RH_TEST_JUDGE_KEY", raising=False)
    found = check_config(_config(tmp_path, ", api_key_env: RH_TEST_JUDGE_KEY"), [])
    assert any("api_key_env='RH_TEST_JUDGE_KEY': that environment variable is not set" in p
               for p in found["problems"]), found["problems"]
    monkeypatch.setenv("RH_TEST_JUDGE_KEY", "k")
    assert check_config(_config(tmp_path, ", api_key_env: RH_TEST_JUDGE_KEY"), [])["problems"] == []
    assert check_config(_config(tmp_path, ""), [])["problems"] == []  # a keyless local server


def test_check_catches_a_missing_aiohttp(tmp_path, monkeypatch):
    from rewardhub._commands.check import check_config

    monkeypatch.setitem(sys.modules, "aiohttp", None)  # as if not installed
    found = check_config(_config(tmp_path, ""), [])
    assert any("pip install 'rewardhub[serve]'" in p for p in found["problems"]), found["problems"]


@pytest.mark.timeout(300)
def test_the_bench_reports_no_rate_when_every_reply_failed(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "bench"))
    import bench_judge

    stub = StubJudge(lambda body, n: (200, "I would rather not grade this."))
    try:
        with pytest.raises(SystemExit) as exc:
            bench_judge.judge(stub.url[:-3], "stub", 4, 2)
    finally:
        stub.close()
    assert "every one of the 4 judge calls failed" in str(exc.value) and "no rate" in str(exc.value)
