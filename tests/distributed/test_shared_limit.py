"""``max_rpm`` / ``max_tpm`` of a judge endpoint hold across processes: three drivers of one Ray cluster
score ``llm_judge`` against one stub (tests/judge_stub.py), which counts the arrivals. Each process alone
keeps to the limit; before the limiter was the cluster's, the three together sent three times it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from judge_stub import StubJudge

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.ray

CALLS = 30  # per process

CLIENT = """
import json, os, sys, time
import ray
for attempt in range(3):  # a loaded host may take longer than one connect's bound to answer
    try:
        ray.init(address=sys.argv[1], log_to_driver=False)
        break
    except ConnectionError:
        if attempt == 2:
            raise
        time.sleep(2)
from rewardhub.execution import Runner

url, limits, go = sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
samples = [{"prompt": "p", "response": f"r{os.getpid()}-{i}", "ground_truth": "4", "data_source": "d"}
           for i in range(int(sys.argv[5]))]
kw = {"base_url": url, "model": "stub", "backoff_s": 0.01, **limits}
with Runner.from_config({"rewards": [{"name": "llm_judge", "kwargs": kw, "cache": False}]}) as runner:
    open(go + "." + str(os.getpid()), "w").close()
    end = time.monotonic() + 120
    while not os.path.exists(go) and time.monotonic() < end:
        time.sleep(0.02)
    res = runner.score(samples)
print(json.dumps([r["llm_judge"] for r in res.rewards]))
"""


@pytest.fixture(scope="module")
def head(own_ray):
    from ray.cluster_utils import Cluster
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    c.add_node(num_cpus=1)
    c.wait_for_nodes()
    try:
        yield c
    finally:
        c.shutdown()


def _three_processes(address: str, stub: StubJudge, limits: dict, tmp_path) -> list[float]:
    """Three drivers score CALLS samples each, all starting together; the stub's arrival times."""
    go = tmp_path / "go"
    # the cluster's own auth setting stays (a local Ray started earlier in this process turned tokens on)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_") or k.startswith("RAY_AUTH")}
    args = [sys.executable, "-c", CLIENT, address, stub.url, json.dumps(limits), str(go), str(CALLS)]
    procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
             for _ in range(3)]
    try:
        end = time.monotonic() + 180
        while len(list(tmp_path.glob("go.*"))) < 3:  # every process is ready to score
            assert time.monotonic() < end and all(p.poll() is None for p in procs), [
                p.communicate()[1][-2000:] for p in procs if p.poll() is not None]
            time.sleep(0.05)
        go.touch()
        outs = [p.communicate(timeout=240) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()  # reaped, pipes closed: nothing left for a later test's collector
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
        assert json.loads(out.splitlines()[-1]) == [7.0] * CALLS
    # every sample was asked (a try that a loaded host's connection lost is tried again: max_rpm counts
    # each try, so the rate below is over every arrival)
    asked = {json.dumps(r["body"]["messages"], sort_keys=True) for r in stub.requests}
    assert len(asked) == 3 * CALLS, len(asked)
    return sorted(r["t"] for r in stub.requests)


#: arrivals left out of the rate: each process's first call also opens its HTTP session, and one that
#: comes late would shorten the span measured (never the rate the limiter keeps)
SKIP = 5


def _per_minute(arrivals: list[float]) -> float:
    kept = arrivals[SKIP:]
    return (len(kept) - 1) / (kept[-1] - kept[0]) * 60.0


def _tokens(body: dict) -> float:
    """The judge's estimate of a request's tokens (4 characters a token, plus the longest reply)."""
    return sum(len(m["content"]) for m in body["messages"]) / 4 + body["max_tokens"]


@pytest.mark.timeout(400)
def test_max_rpm_holds_across_three_processes(head, tmp_path):
    stub = StubJudge()
    try:
        arrivals = _three_processes(head.address, stub, {"max_rpm": 600}, tmp_path)
    finally:
        stub.close()
    assert len(arrivals) >= 3 * CALLS
    rate = _per_minute(arrivals)
    assert 600 * 0.8 <= rate <= 600 * 1.05, rate  # held, and the three together do use it


@pytest.mark.timeout(400)
def test_max_tpm_holds_across_three_processes(head, tmp_path):
    stub = StubJudge()
    limit = 600 * 240  # about 10 calls a second (a call is about 240 tokens)
    try:
        arrivals = _three_processes(head.address, stub, {"max_tpm": limit, "max_tokens": 64}, tmp_path)
        reqs = sorted(stub.requests, key=lambda r: r["t"])[SKIP:]
    finally:
        stub.close()
    assert len(arrivals) >= 3 * CALLS
    span = reqs[-1]["t"] - reqs[0]["t"]
    sent = sum(_tokens(r["body"]) for r in reqs[:-1])  # the last one's tokens are spent after the span
    burst = limit / 60  # a second's worth may come at once
    assert sent <= limit / 60 * span * 1.05 + burst, (sent, span)
