"""``max_concurrency`` of a judge endpoint holds across processes: three drivers of one Ray cluster score
``llm_judge`` against one stub (tests/judge_stub.py) that records the most requests it held at once.
Each process alone keeps to the limit; before the slots were the cluster's, the three together held three
times it. The slots are leases: a process killed while it holds them gives them back within LEASE_S."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from judge_stub import StubJudge

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.ray

CALLS = 12  # per process
LIMIT = 2

CONNECT = """
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
"""

CLIENT = CONNECT + """
from rewardhub.execution import Runner

url, limit, go = sys.argv[2], int(sys.argv[3]), sys.argv[4]
samples = [{"prompt": "p", "response": f"r{i}", "ground_truth": "4", "data_source": "d"}
           for i in range(int(sys.argv[5]))]
kw = {"base_url": url, "model": "stub", "backoff_s": 0.01, "max_concurrency": limit}
with Runner.from_config({"rewards": [{"name": "llm_judge", "kwargs": kw, "cache": False}]}) as runner:
    open(go + "." + str(os.getpid()), "w").close()
    end = time.monotonic() + 120
    while not os.path.exists(go) and time.monotonic() < end:
        time.sleep(0.02)
    res = runner.score(samples)
print(json.dumps([r["llm_judge"] for r in res.rewards]))
"""

#: holds every slot of the endpoint until killed
HOLDER = CONNECT + """
import asyncio
from rewardhub._concurrency import slot

async def hold(k):
    async with slot(sys.argv[2], int(sys.argv[3])):
        open(sys.argv[4] + "." + str(k), "w").close()
        await asyncio.sleep(3600)

async def main():
    await asyncio.gather(*(hold(k) for k in range(int(sys.argv[3]))))

asyncio.run(main())
"""

#: takes one slot of the endpoint and says how long it waited
TAKER = CONNECT + """
import asyncio
from rewardhub._concurrency import slot

async def main():
    t0 = time.monotonic()
    async with slot(sys.argv[2], int(sys.argv[3])):
        print(json.dumps({"waited_s": time.monotonic() - t0}))

asyncio.run(main())
"""


@pytest.fixture(scope="module")
def head(own_ray):
    from ray.cluster_utils import Cluster
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    c.add_node(num_cpus=1)
    c.add_node(num_cpus=1)
    c.wait_for_nodes()
    try:
        yield c
    finally:
        c.shutdown()


def _env() -> dict[str, str]:
    # the cluster's own auth setting stays (a local Ray started earlier in this process turned tokens on)
    return {k: v for k, v in os.environ.items() if not k.startswith("RAY_") or k.startswith("RAY_AUTH")}


def _stop(procs) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.communicate()  # reaped, pipes closed


@pytest.mark.timeout(400)
def test_max_concurrency_holds_across_three_processes(head, tmp_path):
    stub = StubJudge(service_s=0.2)
    go = tmp_path / "go"
    args = [sys.executable, "-c", CLIENT, head.address, stub.url, str(LIMIT), str(go), str(CALLS)]
    procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(), text=True)
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
        _stop(procs)
        stub.close()
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
        assert json.loads(out.splitlines()[-1]) == [7.0] * CALLS
    assert len(stub.requests) == 3 * CALLS
    assert stub.peak <= LIMIT, stub.peak  # each process alone would hold LIMIT: three times it together
    assert stub.peak == LIMIT  # and the slots are used


@pytest.mark.timeout(300)
def test_a_killed_holder_gives_its_slots_back(head, tmp_path):
    """A process that holds every slot and is killed (no release) keeps them no longer than its lease."""
    url = "http://127.0.0.1:9/v1-lease-test"
    held = tmp_path / "held"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, head.address, url, str(LIMIT), str(held)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(), text=True)
    procs = [holder]
    try:
        end = time.monotonic() + 180
        while len(list(tmp_path.glob("held.*"))) < LIMIT:
            assert time.monotonic() < end and holder.poll() is None, holder.communicate()[1][-2000:]
            time.sleep(0.05)
        holder.send_signal(signal.SIGKILL)
        holder.wait(30)
        taker = subprocess.Popen([sys.executable, "-c", TAKER, head.address, url, str(LIMIT)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(), text=True)
        procs.append(taker)
        out, err = taker.communicate(timeout=200)
        assert taker.returncode == 0, err[-3000:]
        assert json.loads(out.splitlines()[-1])["waited_s"] >= 0
    finally:
        _stop(procs)
