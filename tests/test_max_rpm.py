"""``max_rpm`` has one meaning: requests a minute, counted where they go. A judge's requests go to its
endpoint: its term's ``max_rpm`` and its kwargs' are one bucket per endpoint, each try of a request a
request. Any other reward's term: each call (each try) of the term. (Across a Ray cluster's processes:
tests/distributed/test_shared_limit.py.)"""

from __future__ import annotations

import pytest
from judge_stub import StubJudge

from rewardhub.execution import Runner

#: 600 a minute: a request every 0.1 s, no burst
SPACING_S = 0.1
#: how much earlier than its turn a request may reach the stub: the jitter of one request's send
JITTER_S = 0.05


@pytest.fixture(scope="module")
def stub():
    server = StubJudge()
    yield server
    server.close()


def _gaps(stub) -> list[float]:
    times = sorted(r["t"] for r in stub.requests)
    return [b - a for a, b in zip(times, times[1:])]


@pytest.mark.timeout(120)
def test_a_judge_terms_max_rpm_limits_its_endpoints_requests_retries_included(stub):
    """Each first try is refused (429) once: 6 samples are 12 requests, every one spaced by the limit.
    As a pace on the term's calls, the retry came 0.01 s after the refusal."""
    stub.reset(lambda body, n: (429, "slow down") if n % 2 == 0 else (200, "Score: 5"))
    kw = {"base_url": stub.url, "model": "stub-judge", "backoff_s": 0.01}
    term = {"name": "llm_judge", "kwargs": kw, "max_rpm": 600, "cache": False, "max_concurrency": 1}
    samples = [{"prompt": "q", "response": str(i), "ground_truth": "4"} for i in range(6)]
    with Runner.from_config({"rewards": [term]}) as runner:
        res = runner.score(samples)
    assert [r["llm_judge"] for r in res.rewards] == [5.0] * 6
    assert len(stub.requests) == 12
    assert min(_gaps(stub)) >= SPACING_S - JITTER_S, _gaps(stub)


@pytest.mark.timeout(120)
def test_two_judge_terms_on_one_endpoint_share_its_limit(stub):
    """Two terms judging with the same endpoint and limit take their turns from one bucket (as two
    paced terms, each had its own and the second's first request came at once)."""
    stub.reset(lambda body, n: (200, "Score: 5"))
    kw = {"base_url": stub.url, "model": "stub-judge"}
    terms = [{"name": "llm_judge", "alias": alias, "kwargs": kw, "max_rpm": 600, "cache": False}
             for alias in ("first", "second")]
    samples = [{"prompt": "q", "response": str(i), "ground_truth": "4"} for i in range(5)]
    with Runner.from_config({"rewards": terms}) as runner:
        res = runner.score(samples)
    assert [r["first"] for r in res.rewards] == [r["second"] for r in res.rewards] == [5.0] * 5
    assert len(stub.requests) == 10
    assert min(_gaps(stub)) >= SPACING_S - JITTER_S, _gaps(stub)


@pytest.mark.timeout(120)
def test_the_smaller_of_a_terms_and_its_kwargs_max_rpm_holds(stub):
    stub.reset(lambda body, n: (200, "Score: 5"))
    kw = {"base_url": stub.url, "model": "stub-judge", "max_rpm": 6000}  # 0.01 s: the term's is smaller
    term = {"name": "llm_judge", "kwargs": kw, "max_rpm": 600, "cache": False}
    with Runner.from_config({"rewards": [term]}) as runner:
        res = runner.score([{"prompt": "q", "response": str(i)} for i in range(5)])
    assert [r["llm_judge"] for r in res.rewards] == [5.0] * 5
    assert min(_gaps(stub)) >= SPACING_S - JITTER_S, _gaps(stub)
