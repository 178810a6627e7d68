"""One Runner, many callers at once: threads and asyncio tasks score overlapping batches on the same
process pool (verl's reward loop and a reward server do), each getting its own batch's scores."""

from __future__ import annotations

import asyncio
import os
import threading
import time

import pytest

from rewardhub.execution import Runner


@pytest.fixture(autouse=True)
def _tests_on_path(monkeypatch):
    monkeypatch.syspath_prepend(os.path.dirname(__file__))


def math_rows(offset, n=12):
    """Half right, half wrong; the answers depend on ``offset`` so that mixed-up batches show."""
    return [
        {"prompt": "p", "response": f"so \\boxed{{{offset + i}}}", "ground_truth": str(offset + i + i % 2)}
        for i in range(n)
    ], [1.0 if i % 2 == 0 else 0.0 for i in range(12)]


@pytest.fixture(scope="module")
def math_runner():
    # math_verify's default executor is the process pool (timeout_s: 10)
    with Runner.from_config({"rewards": [{"name": "math_verify"}]}, process_workers=2) as r:
        assert r.facts[0].executor == "process"
        yield r


def _check(res, expected):
    assert res.errors == [{}] * len(expected), [e for e in res.errors if e][:3]
    assert res.scores == expected


@pytest.mark.timeout(300)
def test_many_threads_score_overlapping_batches_on_one_pool(math_runner):
    failures = []
    start = threading.Barrier(8)

    def caller(k):
        try:
            start.wait()
            for j in range(6):
                rows, expected = math_rows(1000 * k + 100 * j)
                _check(math_runner.score(rows), expected)
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(f"thread {k}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=caller, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert math_runner._pool is not None and math_runner._pool.crashes == 0


@pytest.mark.timeout(300)
def test_many_asyncio_tasks_score_overlapping_batches_on_one_pool(math_runner):
    async def main():
        async def one(k):
            rows, expected = math_rows(50_000 + 100 * k)
            if k % 2:
                res = await math_runner.score_async(rows)
            else:
                res = await asyncio.to_thread(math_runner.score, rows)
            return res, expected

        return await asyncio.gather(*(one(k) for k in range(24)))

    for res, expected in asyncio.run(main()):
        _check(res, expected)


@pytest.mark.timeout(240)
def test_concurrent_batches_share_the_workers_rather_than_wait_in_turn(tmp_path):
    """Four callers with one sample each, on a pool of four: all four calls run at once (each waits
    until the four meet); callers queued behind one another would never meet."""
    term = {"module": "rewards_for_tests", "function": "meet", "executor": "process", "timeout_s": 150}
    info = {"dir": str(tmp_path), "k": 4}
    with Runner.from_config({"rewards": [term]}, process_workers=4) as r:
        out: dict[int, object] = {}

        def caller(k):
            out[k] = r.score([{"prompt": "p", "response": str(k), "extra_info": info}])

        threads = [threading.Thread(target=caller, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert [out[k].scores for k in range(4)] == [[1.0]] * 4, [out[k].errors for k in range(4)]


@pytest.mark.timeout(120)
def test_workers_outlive_the_thread_that_started_them():
    """Linux kills a worker when the *thread* that forked it ends (PR_SET_PDEATHSIG): a pool
    started by a caller's short-lived thread must keep its workers for the next callers."""
    with Runner.from_config({"rewards": [{"name": "math_verify"}]}, process_workers=2) as r:
        rows, expected = math_rows(7)
        t = threading.Thread(target=lambda: _check(r.score(rows), expected))
        t.start()
        t.join()
        pids = r.worker_pids()
        assert pids
        _check(r.score(rows), expected)
        assert r._pool is not None and r._pool.crashes == 0
        assert set(pids) <= set(r.worker_pids())


@pytest.mark.timeout(300)
def test_a_callers_failing_progress_callback_fails_that_caller_only(math_runner):
    """Callbacks of one caller may run in another caller's thread (whichever drives the pool):
    what they raise reaches their own caller, and the others' batches finish."""
    got: dict[str, object] = {}
    start = threading.Barrier(4)

    def bad_progress(done, total):
        raise ValueError("progress callback failed")

    def caller(name, progress):
        start.wait()
        rows, expected = math_rows(hash(name) % 1000 * 100)
        try:
            res = math_runner.score(rows, progress=progress)
            got[name] = res.scores == expected
        except ValueError as exc:
            got[name] = str(exc)

    threads = [threading.Thread(target=caller, args=(n, p)) for n, p in
               (("a", None), ("bad", bad_progress), ("b", None), ("c", None))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == {"a": True, "b": True, "c": True, "bad": "progress callback failed"}
    rows, expected = math_rows(3)
    _check(math_runner.score(rows), expected)


@pytest.mark.timeout(60)
def test_a_caller_joining_while_the_driver_takes_tasks_still_wakes_it(monkeypatch):
    """The race behind a CI failure: a caller joins (its tasks, then a wake-up byte) while the
    driver is inside ``take()``. Whatever the interleaving, afterwards either its tasks are in the
    driver's queue or a byte is left in the pipe for the driver's next ``poll()``; else they wait
    unseen until some other event (a call's whole timeout)."""
    import collections
    import select

    from rewardhub.execution import _callers
    from rewardhub.execution._task import Task

    callers = _callers.Callers()
    callers._driving = True  # another caller drives: joining only queues the tasks and writes a byte
    real_read = os.read
    joined = threading.Event()

    def late_join():
        with callers._cond:  # what join() does while a driver runs, without waiting for the result
            callers._incoming.append(Task.__new__(Task))
            os.write(callers._wake_w, b"w")
        joined.set()

    def read_while_a_caller_joins(fd, n):
        if not joined.is_set():  # the join lands between the pipe's read and the tasks' move
            threading.Thread(target=late_join).start()
            joined.wait()
        return real_read(fd, n)

    class _Os:
        def __getattr__(self, name):
            return read_while_a_caller_joins if name == "read" else getattr(os, name)

    monkeypatch.setattr(_callers, "os", _Os())
    queue: collections.deque = collections.deque()
    callers.take(queue)
    monkeypatch.undo()
    poller = select.poll()
    poller.register(callers.wake_fd, select.POLLIN)
    woken = bool(poller.poll(0))
    assert queue or woken, "a joined caller's tasks neither taken nor signalled"
    callers.close_fds()


@pytest.mark.timeout(120)
def test_close_while_other_threads_score_ends_them_with_a_clear_error():
    """Two threads score hung calls on the process pool (one drives it, the other waits on it);
    closing the runner from a third ends promptly and both scoring threads get an error naming the
    close, rather than waiting for ever on workers that are gone."""
    term = {"module": "rewards_for_tests", "function": "slow_or_hang", "executor": "process"}
    r = Runner.from_config({"rewards": [term]}, process_workers=2)
    started = threading.Event()
    errors: dict[int, BaseException] = {}

    def caller(k):
        try:
            r.score([{"prompt": "p", "response": "hang"}] * 2)
        except BaseException as exc:  # noqa: BLE001 - what the test looks at
            errors[k] = exc

    threads = [threading.Thread(target=caller, args=(k,), daemon=True) for k in range(2)]
    for t in threads:
        t.start()
    while len(r.worker_pids()) < 2:  # both workers run a hung call
        started.wait(0.01)
    closer = threading.Thread(target=r.close, daemon=True)
    closer.start()
    closer.join(30)
    for t in threads:
        t.join(30)
    assert not closer.is_alive() and not any(t.is_alive() for t in threads)
    assert sorted(errors) == [0, 1]
    assert all("closed while" in str(e) for e in errors.values()), errors


LOGGING_REWARD = '''
import time
def logged(*, response, extra_info, **kwargs):
    """Appends its response to a log (the order calls ran in), after a short wait."""
    time.sleep(0.002)
    with open(extra_info["log"], "a") as f:
        f.write(response + "\\n")
    return 1.0
'''


def _logged_runner(tmp_path):
    path = tmp_path / "logged_reward.py"
    path.write_text(LOGGING_REWARD)
    term = {"path": str(path), "function": "logged", "executor": "process"}
    return Runner.from_config({"rewards": [term]}, process_workers=1)


def _logged_rows(tmp_path, tag, n):
    return [{"prompt": "p", "response": f"{tag}{i}", "extra_info": {"log": str(tmp_path / "calls.log")}}
            for i in range(n)]


@pytest.mark.timeout(120)
def test_callers_take_turns_so_a_small_call_is_not_stuck_behind_a_big_one(tmp_path):
    """A 2-row call made while a 300-row call runs on the same one-worker pool is scored long
    before the big call's last row (first come, first served, it came after all 300)."""
    with _logged_runner(tmp_path) as r:
        first = threading.Event()
        big = threading.Thread(
            target=lambda: r.score(_logged_rows(tmp_path, "big", 300), progress=lambda d, t: first.set())
        )
        big.start()
        first.wait(60)
        small = r.score(_logged_rows(tmp_path, "small", 2))
        big.join(60)
    calls = (tmp_path / "calls.log").read_text().split()
    assert small.scores == [1.0, 1.0] and len(calls) == 302
    assert calls.index("small1") < calls.index("big299")
    assert calls.index("small1") < 150  # its turn came within a few chunks of the big call's


@pytest.mark.timeout(120)
def test_a_cancelled_score_async_drops_its_calls_not_yet_started(tmp_path):
    """A cancelled score_async's calls that no worker has started are dropped: they neither run
    nor hold up the next caller."""
    log = tmp_path / "calls.log"

    async def main(r):
        gone = asyncio.ensure_future(r.score_async(_logged_rows(tmp_path, "gone", 200)))
        while not (log.exists() and log.read_text()):  # its first call has run
            await asyncio.sleep(0.005)
        gone.cancel()
        small = await r.score_async(_logged_rows(tmp_path, "small", 2))
        with pytest.raises(asyncio.CancelledError):
            await gone
        return small

    with _logged_runner(tmp_path) as r:
        small = asyncio.run(main(r))
        r.score(_logged_rows(tmp_path, "last", 1))  # the pool has nothing else left to run
    calls = log.read_text().split()
    assert small.scores == [1.0, 1.0]
    gone_calls = [c for c in calls if c.startswith("gone")]
    assert len(gone_calls) < 200 and calls.index("small1") < len(gone_calls) + 2
    assert calls[-1] == "last0"


@pytest.mark.timeout(240)
def test_a_call_goes_to_an_idle_worker_not_behind_a_busy_ones_call(tmp_path):
    """A second caller's call, while the first caller's runs on the pool's one started worker, goes to
    a new (idle) worker, not into the queue behind the running call: the two calls meet. (The pool
    here waits 60 s before it calls a worker stuck; queued behind, the second call would start only
    after the first timed out.)"""
    term = {"module": "rewards_for_tests", "function": "meet", "executor": "process", "timeout_s": 30}
    info = {"dir": str(tmp_path), "k": 2}
    with Runner.from_config({"rewards": [term]}, process_workers=2) as r:
        r._get_pool().stuck_after_s = 60.0
        out: dict[int, object] = {}

        def caller(k):
            out[k] = r.score([{"prompt": "p", "response": str(k), "extra_info": info}])

        first = threading.Thread(target=caller, args=(0,))
        first.start()
        while not os.listdir(tmp_path):  # the first call runs (it left its file)
            assert first.is_alive()
            time.sleep(0.01)
        caller(1)
        first.join()
    assert [out[k].scores for k in range(2)] == [[1.0]] * 2, [out[k].errors for k in range(2)]




_SLOW_FORK = {"on": False}  # read in a forked child: on, the worker starts 3 s late


def _slow_child() -> None:
    if _SLOW_FORK["on"]:
        time.sleep(3)


os.register_at_fork(after_in_child=_slow_child)


@pytest.mark.timeout(240)
def test_a_call_queued_behind_a_worker_slow_to_start_is_taken_back_once_it_starts(tmp_path):
    """A second caller's call is queued behind the first's on the pool's one worker, which is slow to
    start: stuck before it has started either call, nothing can be taken back yet; once it runs the
    first, the second is taken back and runs on a spare worker, so the two meet (else the second
    waits for the first's timeout)."""
    term = {"module": "rewards_for_tests", "function": "meet", "executor": "process", "timeout_s": 30}
    info = {"dir": str(tmp_path), "k": 2}
    with Runner.from_config({"rewards": [term]}, process_workers=1) as r:
        pool = r._get_pool()
        pool.stuck_after_s = 1.0  # the second call comes within this of the first: it is queued behind
        out: dict[int, object] = {}

        def caller(k):
            out[k] = r.score([{"prompt": "p", "response": str(k), "extra_info": info}])

        _SLOW_FORK["on"] = True
        try:
            first = threading.Thread(target=caller, args=(0,))
            first.start()
            while not any(w.inflight for w in list(pool._workers)):  # the first call is sent
                assert first.is_alive()
                time.sleep(0.001)
            caller(1)
            first.join()
        finally:
            _SLOW_FORK["on"] = False
    assert [out[k].scores for k in range(2)] == [[1.0]] * 2, [out[k].errors for k in range(2)]
