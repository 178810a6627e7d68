"""The thread and asyncio executors: a fixed set of threads or coroutines for a whole batch, timeouts per
call."""

from __future__ import annotations

import pytest

from rewardhub.execution import Runner

THREAD_REWARDS = '''
import threading
release = threading.Event()  # set by the test: the calls that hang return
hung = []  # the threads of the calls that hang
def hang():
    hung.append(threading.current_thread())
    release.wait(60)

seen = []
def record(*, response, **kw):
    seen.append(threading.current_thread())  # kept alive here, so every thread object is told apart
    if response == "hang":
        hang()
    return 1.0

calls = []
def count(*, response, **kw):
    calls.append(response)
    if response == "hang":
        hang()
    return 1.0
'''

ASYNC_REWARDS = '''
import asyncio, os
cancelled = []
async def stubborn(*, response, **kw):
    """Swallows its cancellation and answers anyway."""
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        cancelled.append(response)
    return 1.0

import threading
release = threading.Event()  # set by the test: the blocking calls return
blocked = []
async def blocks(*, response, **kw):
    """Makes one blocking call (it holds the event loop) on "block"."""
    if response == "block":
        blocked.append(response)
        release.wait(60)
        return 100.0
    await asyncio.sleep(0)
    return float(len(response))

started = []
all_in = threading.Event()  # set once every call has begun (or by the test, at its end)
async def waits_for_all(*, response, extra_info, **kw):
    """A blocking call (it holds the event loop it runs on) until every sample's call has begun."""
    started.append(response)
    if len(started) >= extra_info["n"]:
        all_in.set()
    all_in.wait(120)
    return 1.0 if all_in.is_set() else 0.0

async def hang_once(*, response, extra_info, **kw):
    """Hangs on its first try of each sample, answers on the second."""
    path = extra_info["marks"] + "/" + response
    if not os.path.exists(path):
        open(path, "w").close()
        await asyncio.sleep(30)
    return float(len(response))
'''


def _rows(*responses, **extra):
    return [
        {"prompt": "p", "response": r, "ground_truth": None, "data_source": "d", "extra_info": dict(extra)}
        for r in responses
    ]


def _runner(tmp_path, source, function, **policy):
    path = tmp_path / "local_rewards.py"
    path.write_text(source)
    return Runner.from_config({"rewards": [{"path": str(path), "function": function, **policy}]})


def _seen(runner):
    """The reward module's list of the threads that called it, emptied (the module may be shared)."""
    seen = runner.terms[0].invoker.fn.__globals__["seen"]
    seen.clear()
    return seen


def _hung(runner):
    """The reward module's threads of hung calls (emptied) and the event that releases them (cleared)."""
    names = runner.terms[0].invoker.fn.__globals__
    names["hung"].clear()
    names["release"].clear()
    return names["hung"], names["release"]


def test_thread_executor_reuses_its_threads(tmp_path):
    with _runner(tmp_path, THREAD_REWARDS, "record", executor="thread", max_concurrency=3) as r:
        seen = _seen(r)
        res = r.score(_rows(*[f"r{i}" for i in range(300)]))
    assert res.scores == [1.0] * 300
    assert len(seen) == 300 and len(set(seen)) <= 3


def test_thread_timeout_replaces_the_thread_and_the_rest_goes_on(tmp_path):
    rows = [f"r{i}" for i in range(40)]
    rows[5] = rows[30] = "hang"
    with _runner(
        tmp_path, THREAD_REWARDS, "record", executor="thread", max_concurrency=2, timeout_s=0.5
    ) as r:
        seen = _seen(r)
        hung, release = _hung(r)
        res = r.score(_rows(*rows))
        # the batch was done while both hung calls still hung (it never waited for them)
        assert len(hung) == 2 and all(t.is_alive() for t in hung)
        release.set()
    assert [i for i, s in enumerate(res.scores) if s != 1.0] == [5, 30]
    assert res.metrics["rewards/record/timeouts"] == 2.0 and r.abandoned_threads == 2
    assert len(set(seen)) <= 4  # two threads, and one replacement for each hung one


def test_thread_batches_give_back_the_calls_behind_a_hung_one(tmp_path):
    """Threads take fast calls many at a time; the calls taken along with a hung one and not
    started go back to the queue: every call runs exactly once, and only the hung one times out."""
    rows = [f"r{i}" for i in range(3000)]
    rows[1500] = "hang"
    with _runner(tmp_path, THREAD_REWARDS, "count", executor="thread", max_concurrency=2, timeout_s=0.5) as r:
        calls = r.terms[0].invoker.fn.__globals__["calls"]
        calls.clear()
        hung, release = _hung(r)
        res = r.score(_rows(*rows))
        assert len(hung) == 1 and hung[0].is_alive()  # done while the hung call still hung
        release.set()
    assert sorted(calls) == sorted(rows)  # each call made once: none lost, none repeated
    assert [i for i, s in enumerate(res.scores) if s != 1.0] == [1500]
    assert res.metrics["rewards/count/timeouts"] == 1.0 and r.abandoned_threads == 1


def test_async_timeout_holds_even_when_the_reward_swallows_its_cancellation(tmp_path):
    with _runner(tmp_path, ASYNC_REWARDS, "stubborn", timeout_s=0.3) as r:
        cancelled = r.terms[0].invoker.fn.__globals__["cancelled"]
        cancelled.clear()
        res = r.score(_rows("a", "b"))
    assert sorted(cancelled) == ["a", "b"]  # both were cancelled at the timeout, not waited for
    assert res.metrics["rewards/stubborn/timeouts"] == 2.0
    assert all("timed out after 0.3s" in e["stubborn"] for e in res.errors)


def test_async_retry_after_a_timeout(tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    with _runner(tmp_path, ASYNC_REWARDS, "hang_once", timeout_s=0.3, retries=1, max_concurrency=2) as r:
        res = r.score(_rows("ab", "abc", "a", marks=str(marks)))
    assert res.scores == [2.0, 3.0, 1.0]
    assert res.metrics["rewards/hang_once/timeouts"] == 0.0


def test_async_timeout_holds_when_the_reward_blocks_its_event_loop(tmp_path):
    """A blocking call in an async reward holds the loop its calls (and their watchdog) run on: the
    call still times out, the others get their scores, and the runner scores the next batch; all
    while the blocked call still blocks (the test releases it at the end)."""
    with _runner(tmp_path, ASYNC_REWARDS, "blocks", timeout_s=0.3, max_concurrency=4,
                 on_failure="nan") as r:
        names = r.terms[0].invoker.fn.__globals__
        names["release"].clear()
        names["blocked"].clear()
        try:
            res = r.score(_rows("a", "bb", "block", "dddd", "eeeee", "ffffff"))
            again = r.score(_rows("x", "block", "xxx"))
            assert len(names["blocked"]) == 2 and not names["release"].is_set()
        finally:
            names["release"].set()
    assert res.scores[:2] == [1.0, 2.0] and res.scores[3:] == [4.0, 5.0, 6.0], res.errors
    assert res.scores[2] != res.scores[2]  # NaN: its on_failure value
    assert res.metrics["rewards/blocks/timeouts"] == 1.0
    assert "timed out after 0.3s" in res.errors[2]["blocks"] and "blocking call" in res.errors[2]["blocks"]
    assert again.scores[0] == 1.0 and again.scores[2] == 3.0
    assert again.metrics["rewards/blocks/timeouts"] == 1.0
    assert r.abandoned_threads == 2


@pytest.mark.timeout(300)
def test_async_rewards_that_block_wait_side_by_side_not_one_after_another(tmp_path):
    """A reward that blocks its event loop on every call (`time.sleep`, a sync client) must not cost a
    timeout per call: each call here blocks until all six have begun, so run one after another each
    would time out (the last alone answering); side by side, every call answers in time."""
    with _runner(tmp_path, ASYNC_REWARDS, "waits_for_all", timeout_s=20, on_failure="nan") as r:
        names = r.terms[0].invoker.fn.__globals__
        names["started"].clear()
        names["all_in"].clear()
        try:
            res = r.score(_rows(*"abcdef", n=6))
        finally:
            names["all_in"].set()
    assert res.scores == [1.0] * 6, res.errors
    assert res.metrics["rewards/waits_for_all/timeouts"] == 0.0
    assert sorted(names["started"]) == list("abcdef")  # each called once
