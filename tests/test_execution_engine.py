"""The engine's newer parts: the inline fast path, chunked process pool (take-back, spares,
overlapping timeouts, workers that die with their parent), and the ``reward.sandbox`` contract."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from rewardhub.errors import RewardExecutionError
from rewardhub.errors import UsageError
from rewardhub.execution import Runner

REWARDS = '''
import math, os, time
from rewardhub.decorator import reward

def plain(*, response, **kwargs):
    if response == "raise":
        raise RuntimeError("boom")
    if response == "int":
        return 2
    if response == "bool":
        return True
    if response == "nan":
        return math.nan
    if response == "none":
        return None
    if response == "dict":
        return {"score": 0.5, "n": 3}
    return float(len(response))

def needs_gt(*, ground_truth, **kwargs):
    return 1.0 if ground_truth else 0.0

def scaled(*, response, factor=1.0):
    return factor * len(response)

def verl(data_source, solution_str, ground_truth, extra_info=None):
    return 1.0 if solution_str == ground_truth else 0.0

def flaky_once(*, response, extra_info, **kwargs):
    path = extra_info["counter"]
    first = not os.path.exists(path)
    open(path, "a").close()
    if first:
        raise RuntimeError("first call fails")
    return 1.0

def sleepy(*, response, **kwargs):
    if response.startswith("sleep:"):
        time.sleep(float(response[6:]))
    elif response == "hang":
        while True:
            time.sleep(1)
    return 1.0

def hang_overlap(*, response, extra_info, **kwargs):
    # "hang": hold a lock on a file of this call and hang; first note whether another hanging call holds
    # its lock now (a killed call's lock is gone with its process)
    if response == "hang":
        import fcntl
        folder = extra_info["dir"]
        for name in os.listdir(folder):
            with open(os.path.join(folder, name)) as other:
                try:
                    fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    open(os.path.join(folder, "..", "overlapped"), "w").close()
        mine = open(os.path.join(folder, "%d-%d" % (os.getpid(), time.monotonic_ns())), "w")
        fcntl.flock(mine, fcntl.LOCK_EX)
        while True:
            time.sleep(1)
    return 1.0

def meet(*, response, extra_info, **kwargs):
    # "meet": a rendezvous: mark this call, then wait until extra_info["n"] calls have marked
    if response == "meet":
        open(os.path.join(extra_info["dir"], "%d-%d" % (os.getpid(), time.monotonic_ns())), "w").close()
        while len(os.listdir(extra_info["dir"])) < extra_info["n"]:
            time.sleep(0.2)  # asleep nearly all the time: the pool sees a waiting call, as for a hang
    return 1.0


def held(*, response, extra_info, **kwargs):
    """'hold' waits (60 s at most) for the file extra_info['release'] and then writes extra_info['ended']."""
    if response == "hold":
        end = time.monotonic() + 60
        while not os.path.exists(extra_info["release"]) and time.monotonic() < end:
            time.sleep(0.02)
        open(extra_info["ended"], "w").close()
    return 1.0

def hang_with_pidfile(*, response, extra_info, **kwargs):
    with open(extra_info["pidfile"], "w") as f:
        f.write(str(os.getpid()))
    while True:
        time.sleep(1)

_seen = set()

def remembers(*, response, **kwargs):
    """Says whether this process has scored the response before (a per-process cache)."""
    if response == "hang":
        while True:
            time.sleep(1)
    if response == "sigkill":
        os.kill(os.getpid(), 9)
    hit = response in _seen
    _seen.add(response)
    return {"score": 1.0, "seen": float(hit), "pid": float(os.getpid())}

@reward(name="sandboxed", capabilities=("sandbox",))
def sandboxed(*, response, sandbox=None, **kwargs):
    return {"score": 1.0, "has_sandbox": float(sandbox is not None),
            "max_concurrent": float((sandbox or {}).get("max_concurrent", -1))}
'''


@pytest.fixture
def rfile(tmp_path):
    path = tmp_path / "engine_rewards.py"
    path.write_text(REWARDS)
    return str(path)


def term(rfile, function, **kw):
    """A term of the test rewards; failures score 0.0 here (``on_failure: zero``) unless ``kw`` says
    otherwise."""
    return {"path": rfile, "function": function, "on_failure": "zero", **kw}


def samples_of(*responses, **info):
    return [{"prompt": "p", "response": r, "ground_truth": "g", "data_source": "d", "extra_info": dict(info)}
            for r in responses]


def score(terms, batch, **cfg):
    with Runner.from_config({"rewards": terms, **cfg}) as r:
        return r.score(batch), r


# ---- the inline fast path -------------------------------------------------------------------
def test_fast_path_values_failures_and_extras(rfile):
    res, _ = score(
        [term(rfile, "plain")], samples_of("abc", "raise", "int", "bool", "nan", "none", "dict", "xy")
    )
    assert res.rewards[0]["plain"] == 3.0 and res.rewards[7]["plain"] == 2.0
    assert res.rewards[2]["plain"] == 2.0 and type(res.rewards[2]["plain"]) is float
    assert res.rewards[3]["plain"] == 1.0 and type(res.rewards[3]["plain"]) is float
    assert (
        res.rewards[1]["plain"] == 0.0
        and "reward 'plain' on sample 1: RuntimeError: boom" in res.errors[1]["plain"]
    )
    assert res.rewards[4]["plain"] == 0.0 and "returned nan" in res.errors[4]["plain"]
    assert res.rewards[5]["plain"] is None and res.scores[5] is None
    assert res.extra[6] == {"plain": {"n": 3}}
    m = res.metrics
    assert (
        m["rewards/plain/errors"] == 2.0 and m["rewards/plain/count"] == 7.0 and m["rewards/plain/n"] == 3.0
    )
    assert len(res.scores) == 8


def test_fast_path_matches_the_general_path(rfile):
    batch = samples_of(*[f"{'x' * (i % 5)}" for i in range(300)], "raise", "none", "dict")
    fast, _ = score([term(rfile, "plain", weight=2.0)], batch)
    slow, _ = score([term(rfile, "plain", weight=2.0, executor="thread", max_concurrency=1)], batch)
    assert fast.scores == slow.scores and fast.rewards == slow.rewards and fast.extra == slow.extra
    assert fast.errors == slow.errors
    for key in ("mean", "std", "count", "errors", "timeouts"):
        a, b = fast.metrics[f"rewards/plain/{key}"], slow.metrics[f"rewards/plain/{key}"]
        assert a == pytest.approx(b), key
    assert fast.metrics["reward/mean"] == pytest.approx(slow.metrics["reward/mean"])


def test_fast_path_optional_fields_missing_and_bad_samples(rfile):
    res, _ = score([term(rfile, "plain")], [{"response": "abcd"}, {"response": "a", "prompt": "p"}])
    assert res.scores == [4.0, 1.0]
    res, _ = score([term(rfile, "needs_gt")], [{"response": "x", "ground_truth": "g"}, {"response": "y"}])
    assert res.scores == [1.0, 0.0]
    with pytest.raises(UsageError, match=r"sample 1 has no 'response'"):
        score([term(rfile, "needs_gt")], [{"response": "x", "ground_truth": "g"}, {"ground_truth": "g"}])
    with pytest.raises(UsageError, match=r"sample 0 is a str, not a mapping"):
        score([term(rfile, "plain")], ["just text"])


def test_fast_path_kwargs_verl_retries_and_raise(rfile, tmp_path):
    res, _ = score([term(rfile, "scaled", kwargs={"factor": 0.5})], samples_of("abcd"))
    assert res.scores == [2.0]
    res, _ = score(
        [term(rfile, "verl")],
        [{"response": "g", "ground_truth": "g"}, {"response": "h", "ground_truth": "g"}],
    )
    assert res.scores == [1.0, 0.0]
    res, _ = score([term(rfile, "flaky_once", retries=1)], samples_of("a", counter=str(tmp_path / "c")))
    assert res.scores == [1.0] and res.outcomes["flaky_once"][0].attempts == 2
    with pytest.raises(RewardExecutionError, match=r"reward 'plain' on sample 2: RuntimeError: boom"):
        score([term(rfile, "plain", on_failure="raise")], samples_of("a", "b", "raise"))


# ---- the process pool -------------------------------------------------------------------------
def test_calls_behind_a_slow_one_are_not_held_up(rfile, tmp_path):
    """One worker; a call that holds until the 30 calls behind it are done: they go to a spare worker
    (the reward sets no max_concurrency, which would forbid a second call at once). Bound by events:
    the slow call ends only once the progress callback saw the 30 fast ones done (or after 60 s, when
    the fast ones were held behind it, which the test then sees)."""
    release, ended = tmp_path / "release", tmp_path / "ended"
    batch = samples_of("hold", *["x"] * 30, release=str(release), ended=str(ended))
    slow_ended_first: list[bool] = []

    def progress(done: int, total: int) -> None:
        if done >= 30 and not release.exists():
            slow_ended_first.append(ended.exists())
            release.touch()

    with Runner.from_config({"rewards": [term(rfile, "held", executor="process")]}, process_workers=1) as r:
        res = r.score(batch, progress=progress)
        pool = r._pool
        assert res.scores == [1.0] * 31 and res.errors == [{}] * 31  # the slow one was not killed
        assert pool.taken_back >= 1 and pool.spares_started >= 1
    assert slow_ended_first == [False]  # thirty calls were done while the slow one still held


def test_timeouts_overlap(rfile, tmp_path):
    """Six calls that hang, timeout 1 s, two workers: spares run them side by side, not one after
    another (a hanging call sees another one hang at the same time: its file lock is held)."""
    locks = tmp_path / "locks"
    locks.mkdir()
    batch = samples_of(*(["hang", "x", "x"] * 6), dir=str(locks))
    res, _ = score([term(rfile, "hang_overlap", executor="process", timeout_s=1, max_concurrency=2)], batch)
    assert res.metrics["rewards/hang_overlap/timeouts"] == 6.0
    assert res.scores == [0.0, 1.0, 1.0] * 6
    assert len(list(locks.iterdir())) == 6 and (tmp_path / "overlapped").exists()


def _hang_many(rfile, hangs, **pool):
    """``hangs`` calls that hang (timeout 1.5 s) among fast ones, two workers; returns the result,
    the spares started and the seconds taken."""
    batch = samples_of(*(["hang"] + ["x"] * 9) * hangs)
    start = time.monotonic()
    with Runner.from_config({"rewards": [term(rfile, "sleepy", executor="process", timeout_s=1.5)]},
                            process_workers=2) as r:
        r.score(samples_of("x", "x"))  # the pool exists: set its knobs
        for k, v in pool.items():
            setattr(r._pool, k, v)
        res = r.score(batch)
        spares = r._pool.spares_started
    assert len(res.scores) == 10 * hangs and res.scores[:10] == [0.0] + [1.0] * 9
    assert res.metrics["rewards/sleepy/timeouts"] == hangs and res.scores.count(1.0) == 9 * hangs
    return spares, time.monotonic() - start


def _meet_many(rfile, meet_dir, calls, n, timeout_s, **pool):
    """``calls`` rendezvous calls (each waits until ``n`` have started) among fast ones, two
    workers; returns the result and the spares started."""
    batch = samples_of(*(["meet"] + ["x"] * 9) * calls, dir=str(meet_dir), n=n)
    with Runner.from_config({"rewards": [term(rfile, "meet", executor="process", timeout_s=timeout_s)]},
                            process_workers=2) as r:
        r.score(samples_of("x", "x", dir=str(meet_dir), n=n))  # the pool exists: set its knobs
        for k, v in pool.items():
            setattr(r._pool, k, v)
        res = r.score(batch)
        spares = r._pool.spares_started
    assert len(res.scores) == 10 * calls
    return res, spares


def test_many_hangs_at_once_do_not_queue_behind_a_spare_cap(rfile, tmp_path):
    """40 calls that each wait until all 40 have started (a rendezvous: they sleep like hung calls
    until then) can only finish if all 40 run side by side: with the default cap each gets a spare
    and every one finishes, no timeout (the 60 s timeout only bounds a failure). A cap of 8 spares
    runs at most 10 at once: none of them can finish until an 11th starts, which needs one of them
    to end first, by its timeout (after it, the rest find 11 marks and finish). Events, not
    seconds: it holds however slowly spares start."""
    (tmp_path / "all").mkdir()
    res, spares = _meet_many(rfile, tmp_path / "all", 40, n=40, timeout_s=60)
    assert res.metrics["rewards/meet/timeouts"] == 0 and res.scores == [1.0] * 400
    assert spares >= 38, spares
    (tmp_path / "capped").mkdir()
    res, spares = _meet_many(rfile, tmp_path / "capped", 40, n=11, timeout_s=1.5, max_spares=8)
    assert res.metrics["rewards/meet/timeouts"] >= 1, res.metrics


def test_workers_die_with_their_parent(rfile, tmp_path):
    """A scoring process killed with SIGKILL leaves no worker behind (its hung worker included)."""
    pidfile = tmp_path / "pid"
    script = textwrap.dedent(f"""
        from rewardhub.execution import Runner
        r = Runner.from_config({{"rewards": [{{"path": {rfile!r}, "function": "hang_with_pidfile",
                                               "executor": "process", "timeout_s": 600}}]}})
        r.score([{{"response": "x", "extra_info": {{"pidfile": {str(pidfile)!r}}}}}])
    """)
    proc = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 60
        while not (pidfile.exists() and pidfile.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        worker = int(pidfile.read_text())
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + 10
    while _alive(worker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(worker)


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _ppid(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def test_a_worker_that_dies_is_reported_and_the_pool_heals(rfile):
    """Workers replaced after hangs and a SIGKILL: each sample is scored once (a new worker starts
    without the old one's cache), a death fails only its call, and closing leaves no process."""
    runner = Runner.from_config({"rewards": [term(rfile, "remembers", executor="process", timeout_s=1,
                                                  max_concurrency=2, pure=True)]})
    known = [f"r{i}" for i in range(100)]
    batch = [x for i, r in enumerate(known) for x in (["hang", r] if i % 25 == 0 else [r])]
    res = runner.score(samples_of(*batch))
    assert len(res.scores) == len(batch) and res.metrics["rewards/remembers/timeouts"] == 4.0
    assert [res.scores[i] for i, r in enumerate(batch) if r != "hang"] == [1.0] * 100
    assert all(e["remembers"]["seen"] == 0.0 for e in res.extra if e.get("remembers"))  # never called twice
    assert all(_ppid(p) == os.getpid() for p in runner.worker_pids())
    died = runner.score(samples_of("r1", "sigkill", "r2"))
    assert "reward worker process died (signal 9)" in died.errors[1]["remembers"]
    assert died.scores[0] == died.scores[2] == 1.0
    pids = runner.worker_pids()
    runner.close()
    deadline = time.monotonic() + 20  # the kernel ends and reaps them: moments, longer on a loaded host
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pids and not any(_alive(p) for p in pids)


def test_results_come_back_in_order_with_many_chunks(rfile):
    batch = samples_of(*["x" * (i % 9) for i in range(2000)])
    res, _ = score([term(rfile, "plain", executor="process", max_concurrency=2)], batch)
    assert res.scores == [float(i % 9) for i in range(2000)]


# ---- reward.sandbox --------------------------------------------------------------------------
def test_sandbox_settings_reach_rewards_with_the_capability(rfile):
    cfg = {"sandbox": {"url": None, "max_concurrent": 3, "memory_limit_mb": 512, "timeout_s": 5,
                       "language": "python"}}
    res, r = score([term(rfile, "sandboxed"), term(rfile, "plain")], samples_of("ab"), **cfg)
    assert res.extra[0]["sandboxed"] == {"has_sandbox": 1.0, "max_concurrent": 3.0}
    assert "sandbox" not in r.terms[1].kwargs  # only rewards with the capability get it
    assert r.terms[0].kwargs["sandbox"] == cfg["sandbox"]
    # the term's own kwargs win
    res, _ = score(
        [term(rfile, "sandboxed", kwargs={"sandbox": {"max_concurrent": 9}})], samples_of("ab"), **cfg
    )
    assert res.extra[0]["sandboxed"]["max_concurrent"] == 9.0
    # and it reaches a process worker too
    res, _ = score([term(rfile, "sandboxed", executor="process")], samples_of("ab"), **cfg)
    assert res.extra[0]["sandboxed"]["max_concurrent"] == 3.0
    # no section: the section's defaults (a validated section always has one)
    res, _ = score([term(rfile, "sandboxed")], samples_of("ab"))
    assert res.extra[0]["sandboxed"] == {"has_sandbox": 1.0, "max_concurrent": 8.0}


def test_sandbox_from_the_loaded_config(rfile, tmp_path):
    from rewardhub.config import load_config

    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"reward:\n  rewards:\n    - path: {rfile}\n      function: sandboxed\n"
                   "  sandbox:\n    max_concurrent: 4\n")
    with Runner.from_config(load_config(str(cfg)).reward) as r:
        sb = r.terms[0].kwargs["sandbox"]
        res = r.score(samples_of("x"))
    assert type(sb) is dict and sb["max_concurrent"] == 4 and "url" in sb and "memory_limit_mb" in sb
    assert not math.isnan(res.scores[0])
    assert os.path.exists(rfile)
