"""A judge's settings are checked before the first call (issue 42 §6): misspelled keys, limits of 0 or
less, and what `rewardhub check` must fail (no base_url, an ftp:// URL, a template naming an unknown
field, a bad score_regex, score_range [5, 1]); a reply larger than its bound is not read whole."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator

import pytest
from judge_stub import StubJudge

from rewardhub.errors import UsageError
from rewardhub.execution import Runner


@pytest.fixture(scope="module")
def stub() -> Iterator[StubJudge]:
    server = StubJudge()
    yield server
    server.close()


def _runner(stub: StubJudge, name: str = "llm_judge", **kwargs: object) -> Runner:
    kw = {"base_url": stub.url, "model": "m", **kwargs}
    return Runner.from_config({"rewards": [{"name": name, "kwargs": kw}]})


@pytest.mark.parametrize("name", ["llm_judge", "llm_judge_group"])
@pytest.mark.parametrize("key,close", [("scor_range", "score_range"), ("max_rmp", "max_rpm"),
                                       ("api_key", "api_key_env")])
def test_a_misspelled_setting_is_an_error_naming_the_valid_ones(stub, name, key, close):
    with pytest.raises(UsageError) as err:
        _runner(stub, name, **{key: 1})
    text = str(err.value)
    assert f"reward term {name!r}: {name} has no setting {key!r} (did you mean {close!r}?)" in text
    assert "its settings: " in text and "base_url" in text and "score_range" in text
    assert not stub.requests


@pytest.mark.parametrize("key,value", [("max_rpm", 0), ("max_rpm", -5), ("max_tpm", 0), ("retries", -1),
                                       ("request_timeout_s", 0), ("max_tokens", 0), ("max_rpm", "fast"),
                                       ("max_reply_bytes", 0)])
def test_limits_of_zero_or_less_are_refused(stub, key, value):
    with pytest.raises(UsageError, match=rf"llm_judge {key}={value!r} is not"):
        _runner(stub, **{key: value})


def test_a_judge_called_directly_checks_its_settings_too(stub):
    from rewardhub.builtin.judge import llm_judge

    stub.reset(lambda body, n: (200, "Score: 5"))
    with pytest.raises(UsageError, match="has no setting 'scor_range'"):
        asyncio.run(llm_judge(response="4", base_url=stub.url, model="m", scor_range=[0, 5]))
    with pytest.raises(UsageError, match="max_rpm=0 is not valid"):
        asyncio.run(llm_judge(response="4", base_url=stub.url, model="m", max_rpm=0))
    assert asyncio.run(llm_judge(response="4", base_url=stub.url, model="m", ground_truth="4")) == 5.0
    assert len(stub.requests) == 1


BAD_JUDGES = {
    "no_url": ({"model": "m"}, "llm_judge needs kwargs.base_url"),
    "ftp": ({"base_url": "ftp://judge.example/v1", "model": "m"}, "is not an http(s) URL"),
    "field": ({"base_url": "http://127.0.0.1:9/v1", "model": "m", "template": "Grade {answer}: Score: N"},
              "template: it names {answer}, which is not a field"),
    "regex": ({"base_url": "http://127.0.0.1:9/v1", "model": "m", "score_regex": "Score: (\\d+"},
              "score_regex='Score: (\\\\d+' is not a regular expression"),
    "range": ({"base_url": "http://127.0.0.1:9/v1", "model": "m", "score_range": [5, 1]},
              "score_range=[5, 1] is not valid"),
    "group_field": ({"base_url": "http://127.0.0.1:9/v1", "model": "m", "template": "{response}"},
                    "llm_judge_group template: it names {response}"),
}


def test_rewardhub_check_fails_each_bad_judge(cli, tmp_path):
    terms = [{"name": "llm_judge_group" if alias.startswith("group") else "llm_judge", "alias": alias,
              "kwargs": kw} for alias, (kw, _) in BAD_JUDGES.items()]
    terms.append({"name": "llm_judge", "alias": "good", "kwargs": {"base_url": "http://127.0.0.1:9/v1",
                                                                   "model": "m"}})
    (tmp_path / "cfg.json").write_text(json.dumps({"reward": {"rewards": terms}}))
    res = cli("check", str(tmp_path / "cfg.json"))
    assert res.returncode != 0
    assert f"{len(BAD_JUDGES)} problem(s)" in res.stderr, res.stderr
    for alias, (_, message) in BAD_JUDGES.items():
        line = next((ln for ln in res.stderr.splitlines() if f"reward term {alias!r}" in ln), "")
        assert message in line, (alias, res.stderr)
    assert "good" in res.stdout


class _Flood:
    """A real aiohttp server whose replies never end (``/flood``) or announce 100 MB (``/announce``)."""

    def __init__(self) -> None:
        self.sent = 0
        self._ready = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        self._thread.start()
        assert self._ready.wait(30)

    async def _main(self) -> None:
        from aiohttp import web

        async def flood(request: web.Request) -> web.StreamResponse:
            resp = web.StreamResponse(headers={"Content-Type": "application/json"})
            await resp.prepare(request)
            chunk = b'{"choices": "' + b"x" * 65536
            try:
                while True:  # until the client goes
                    await resp.write(chunk)
                    self.sent += len(chunk)
            except (ConnectionError, RuntimeError):
                pass
            return resp

        async def announce(request: web.Request) -> web.StreamResponse:
            resp = web.StreamResponse(headers={"Content-Type": "application/json",
                                               "Content-Length": str(100 << 20)})
            await resp.prepare(request)
            await resp.write(b"{")
            await asyncio.sleep(30)
            return resp

        app = web.Application()
        app.router.add_post("/flood/chat/completions", flood)
        app.router.add_post("/announce/chat/completions", announce)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.port = runner.addresses[0][1]
        self.loop = asyncio.get_running_loop()
        self.stop = asyncio.Event()
        self._ready.set()
        await self.stop.wait()
        await runner.cleanup()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.stop.set)
        self._thread.join(10)


@pytest.mark.timeout(120)
def test_a_reply_over_its_bound_is_not_read_whole():
    flood = _Flood()
    try:
        for path in ("flood", "announce"):
            term = {"name": "llm_judge", "timeout_s": 60, "kwargs": {
                "base_url": f"http://127.0.0.1:{flood.port}/{path}", "model": "m", "retries": 0,
                "max_reply_bytes": 1 << 20, "request_timeout_s": 50}}
            with Runner.from_config({"rewards": [term]}) as runner:
                res = runner.score([{"prompt": "p", "response": "r"}])
            error = res.errors[0]["llm_judge"]
            assert "over max_reply_bytes=1048576; it was not read on" in error, error
            assert res.error_kinds[0]["llm_judge"] == "reply_too_large"
    finally:
        flood.close()
