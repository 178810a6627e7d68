"""A judge endpoint's ``max_concurrency`` (kwargs) outside Ray: the most requests in flight from this
process, whatever the term's own ``max_concurrency`` and however many event loops the calls run on."""

from __future__ import annotations

import asyncio
import threading

import pytest
from judge_stub import StubJudge

from rewardhub._concurrency import ProcessGate


@pytest.mark.timeout(120)
def test_a_judge_keeps_to_its_endpoints_max_concurrency():
    from rewardhub.execution import Runner

    stub = StubJudge(service_s=0.05)
    try:
        kw = {"base_url": stub.url, "model": "stub", "backoff_s": 0.01, "max_concurrency": 3}
        term = {"name": "llm_judge", "kwargs": kw, "cache": False, "max_concurrency": 16}
        samples = [{"prompt": "p", "response": f"r{i}"} for i in range(24)]
        with Runner.from_config({"rewards": [term]}) as runner:
            res = runner.score(samples)
    finally:
        stub.close()
    assert [r["llm_judge"] for r in res.rewards] == [7.0] * 24
    assert stub.peak == 3  # 16 at once without it


@pytest.mark.timeout(60)
def test_the_process_gate_holds_across_event_loops():
    gate = ProcessGate(2)
    lock = threading.Lock()
    now = {"in": 0, "peak": 0, "done": 0}

    async def one() -> None:
        await gate.acquire()
        try:
            with lock:
                now["in"] += 1
                now["peak"] = max(now["peak"], now["in"])
            await asyncio.sleep(0.01)
            with lock:
                now["in"] -= 1
                now["done"] += 1
        finally:
            gate.release()

    async def many() -> None:
        await asyncio.gather(*(one() for _ in range(10)))

    threads = [threading.Thread(target=asyncio.run, args=(many(),)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(50)
    assert now["done"] == 40 and now["peak"] == 2, now


@pytest.mark.timeout(60)
def test_a_waiter_cancelled_after_its_wake_up_passes_it_on():
    gate = ProcessGate(1)

    async def main() -> None:
        await gate.acquire()
        first = asyncio.ensure_future(gate.acquire())
        second = asyncio.ensure_future(gate.acquire())
        await asyncio.sleep(0)
        gate.release()  # wakes the first in line ...
        first.cancel()  # ... which is cancelled before it takes the slot
        await asyncio.wait_for(second, 10)  # the second gets it
        gate.release()

    asyncio.run(main())
