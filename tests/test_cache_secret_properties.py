"""Issue 42 §1's promises about the cache and secrets, as properties over generated inputs (Hypothesis).

- A cached score equals an uncached one for any samples that differ in anything the reward reads: text
  and trajectory samples, rewards that read some fields, all of them (``**kwargs``), ``messages`` only,
  or TRL's completions; on every executor where the cache applies (inline, thread, process), with the
  cache kept across examples so that a wrong hit has every chance to show.
- No secret given to rewardhub (a judge's key, the serve token) appears in a row, the summary, stderr or
  a run-folder file, however a judge or a server echoes it and wherever an error is cut.
"""

from __future__ import annotations

import http.server
import json
import string
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from judge_stub import StubJudge

from rewardhub.cli import main
from rewardhub.execution import Runner

PROPERTY = settings(max_examples=25, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

# ---- cached == uncached --------------------------------------------------------------------------

READERS = textwrap.dedent('''
    import hashlib, json

    def _h(*parts):
        blob = json.dumps(parts, sort_keys=True, default=repr)
        return float(int(hashlib.sha256(blob.encode()).hexdigest()[:8], 16) % 1000)

    def reads_some(*, response, ground_truth):
        return _h(response, ground_truth)

    def reads_all(**kwargs):
        return _h(kwargs)

    def reads_chat(*, messages):
        return _h(messages)

    def reads_chat_and_text(*, messages, response, extra_info):
        return _h(messages, response, extra_info)

    def trl_style(prompts, completions, **kwargs):  # TRL's columns: each sample's value at its index
        return [_h(p, c, {k: v[i] for k, v in kwargs.items() if v[i] is not None})
                for i, (p, c) in enumerate(zip(prompts, completions))]
''')
REWARDS = ["reads_some", "reads_all", "reads_chat", "reads_chat_and_text", "trl_style"]
EXECUTORS = ["inline", "thread", "process"]

words = st.text(alphabet="ab1 :", max_size=4)
function = st.fixed_dictionaries({"name": st.sampled_from(["add", "mul"]),
                                  "arguments": st.sampled_from(['{"a": 1}', '{"a": 2}', "a=1"])})
call = st.fixed_dictionaries({"id": st.just("c1"), "type": st.just("function"), "function": function})
assistant = st.fixed_dictionaries({"role": st.just("assistant"), "content": words},
                                  optional={"tool_calls": st.lists(call, max_size=2)})
chat = st.tuples(words, st.lists(assistant, min_size=1, max_size=3)).map(
    lambda t: [{"role": "user", "content": t[0]}, *t[1]])
text_sample = st.fixed_dictionaries({
    "prompt": st.one_of(words, chat.map(lambda c: c[:1])), "response": words,
    "ground_truth": words, "data_source": st.sampled_from(["d1", "d2"]),
    "extra_info": st.dictionaries(st.sampled_from(["uid", "k"]), words, max_size=2)})
trajectory = st.fixed_dictionaries({"messages": chat, "ground_truth": words},
                                   optional={"extra_info": st.dictionaries(st.just("k"), words, max_size=1)})
#: a field and the values it may take instead, to make near twins of a sample
fields = st.sampled_from(["prompt", "response", "ground_truth", "data_source", "extra_info", "messages"])
tweaks = st.tuples(fields, st.one_of(words, chat, st.dictionaries(st.just("k"), words)))


def _twin(sample: dict[str, Any], field: str, value: Any) -> dict[str, Any] | None:
    """``sample`` with ``field`` set to ``value`` where that makes a valid sample."""
    out = dict(sample)
    if field == "messages":
        if not isinstance(value, list):
            return None
        out.pop("prompt", None)
        out.pop("response", None)
    elif field in ("prompt", "response") and "messages" in out:
        return None
    elif field == "extra_info" and not isinstance(value, dict):
        return None
    elif field in ("response", "ground_truth", "data_source") and not isinstance(value, str):
        return None
    out[field] = value
    return out


@st.composite
def batches(draw: Any) -> list[dict[str, Any]]:
    bases = draw(st.lists(st.one_of(text_sample, trajectory), min_size=1, max_size=3))
    batch = list(bases)
    for base in bases:
        for field, value in draw(st.lists(tweaks, max_size=3)):
            twin = _twin(base, field, value)
            if twin is not None:
                batch.append(twin)
    return draw(st.permutations(batch))


@pytest.fixture(scope="module")
def runners(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[Runner, Runner]]]:
    path = tmp_path_factory.mktemp("readers") / "readers.py"
    path.write_text(READERS)
    out = {}
    for executor in EXECUTORS:
        def terms(cache: bool) -> dict[str, Any]:
            return {"rewards": [{"path": str(path), "function": name, "cache": cache, "executor": executor,
                                 "on_failure": "nan"} for name in REWARDS], "aggregation": "weighted_sum"}
        out[executor] = (Runner.from_config(terms(True)), Runner.from_config(terms(False)))
    yield out
    for cached, plain in out.values():
        cached.close()
        plain.close()


def _columns(res: Any) -> dict[str, list[Any]]:
    return {name: [None if v != v else v for v in (row[name] for row in res.rewards)] for name in REWARDS}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("executor", EXECUTORS)
@PROPERTY
@given(batch=batches())
def test_a_cached_score_is_the_uncached_score(runners, executor, batch):
    cached, plain = runners[executor]
    want = plain.score(batch)
    got = cached.score(batch)  # the cache was filled by earlier examples: hits are checked as well
    assert _columns(got) == _columns(want)
    assert [r for r in got.errors] == [r for r in want.errors]
    again = cached.score(list(reversed(batch)))
    assert _columns(again) == {k: v[::-1] for k, v in _columns(want).items()}


# ---- no secret written ---------------------------------------------------------------------------

secrets_st = st.text(alphabet=string.ascii_letters + string.digits + "-_", min_size=12, max_size=48).map(
    lambda s: "sk-" + s)
#: how an answer holds the secret: whole, after `Bearer `, JSON-escaped in a body, or a piece a proxy cut
forms = st.sampled_from(["raw", "bearer", "json", "piece"])


def _echo(secret: str, form: str) -> str:
    return {"raw": secret, "bearer": f"Authorization: Bearer {secret}", "json": json.dumps({"auth": secret}),
            "piece": secret[2:2 + max(8, len(secret) // 2)]}[form]


def _written(folder: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in sorted(folder.rglob("*")) if p.is_file()
                   and p.name not in ("cfg.json",))


def _leaks(secret: str, text: str) -> list[str]:
    return [secret[k:k + 8] for k in range(len(secret) - 7) if secret[k:k + 8] in text]


@pytest.fixture(scope="module")
def judge() -> Iterator[StubJudge]:
    server = StubJudge()
    yield server
    server.close()


def _run_score(folder: Path, cfg: dict[str, Any], capfd: Any, env: dict[str, str],
               monkeypatch: Any) -> tuple[int, str]:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    (folder / "cfg.json").write_text(json.dumps({"reward": cfg}))
    (folder / "data.jsonl").write_text("".join(json.dumps({"prompt": "p", "response": r}) + "\n"
                                              for r in ("a", "b", "c")))
    capfd.readouterr()
    code = main(["score", str(folder / "cfg.json"), str(folder / "data.jsonl"), "-o",
                 str(folder / "run" / "out.jsonl"), "--summary-json", str(folder / "run" / "summary.json"),
                 "--no-progress"])
    out = capfd.readouterr()
    return code, out.out + out.err


@pytest.mark.timeout(600)
@PROPERTY
@given(secret=secrets_st, form=forms, status=st.sampled_from([200, 400, 401, 500]),
       offset=st.integers(0, 400), raw=st.booleans())
def test_no_judge_key_is_written(judge, tmp_path_factory, capfd, monkeypatch, secret, form, status, offset,
                                 raw):
    """The judge echoes its key (or a piece of it) at any place of its answer: an error, a reply that is
    not JSON, a reply whose text holds it; errors are cut at 200-300 characters."""
    body = "x" * offset + " " + _echo(secret, form) + " Score: 5"
    judge.reset(lambda req, n: (status, ("raw:" + body) if raw and status == 200 else body))
    folder = tmp_path_factory.mktemp("judge")
    (folder / "run").mkdir()
    term = {"name": "llm_judge", "cache": False, "kwargs": {"base_url": judge.url, "model": "m", "retries": 0,
                                                            "api_key_env": "PROP_JUDGE_KEY"}}
    code, said = _run_score(folder, {"rewards": [term]}, capfd, {"PROP_JUDGE_KEY": secret}, monkeypatch)
    assert code in (0, 1), said
    assert judge.requests and judge.requests[0]["headers"]["Authorization"] == f"Bearer {secret}"
    assert _leaks(secret, said + _written(folder)) == []


class _Echoing(http.server.BaseHTTPRequestHandler):
    """A server or proxy answering every request with ``status`` and a body that echoes the token."""

    status = 401
    form = "raw"
    offset = 0
    as_json = True

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        auth = self.headers.get("Authorization", "")
        token = auth.split()[-1] if auth else ""
        text = "y" * self.offset + " " + _echo(token, self.form)
        data = (json.dumps({"error": text}) if self.as_json else text).encode()
        self.send_response(self.status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_POST = do_GET  # noqa: N815

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def echo() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Echoing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(10)


@pytest.mark.timeout(600)
@settings(PROPERTY, max_examples=12)
@given(secret=secrets_st, form=forms, status=st.sampled_from([400, 401, 403, 500, 503]),
       offset=st.integers(0, 300), as_json=st.booleans())
def test_no_serve_token_is_written(echo, tmp_path_factory, capfd, monkeypatch, secret, form, status, offset,
                                   as_json):
    _Echoing.status, _Echoing.form, _Echoing.offset, _Echoing.as_json = status, form, offset, as_json
    folder = tmp_path_factory.mktemp("remote")
    (folder / "run").mkdir()
    remote = {"url": echo, "retry_for_s": 0.5, "connect_timeout_s": 2, "timeout_s": 10}
    code, said = _run_score(folder, {"remote": remote}, capfd, {"REWARDHUB_SERVE_TOKEN": secret}, monkeypatch)
    assert code != 0 and f"{status}" in said, said
    assert _leaks(secret, said + _written(folder)) == []
