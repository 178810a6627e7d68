"""The process executor's per-reward policy: each sample called once, ``max_concurrency``
honoured (workers started lazily), and a per-worker memory limit."""

from __future__ import annotations

import json
import os

import pytest

from rewardhub.execution import Runner

REWARDS = '''
import os, time

def logs_calls(*, response, extra_info, **kwargs):
    """A reward with a side effect: one line per call in a log file."""
    with open(extra_info["log"], "a") as f:
        f.write(response + "\\n")
    if response == "hang":
        time.sleep(600)
    return 1.0

def spans(*, response, extra_info, **kwargs):
    """Records when it ran and where, then sleeps a little."""
    start = time.monotonic()
    time.sleep(0.05)
    with open(extra_info["log"], "a") as f:
        f.write(f"{os.getpid()} {start} {time.monotonic()}\\n")
    return 1.0

def allocates(*, response, **kwargs):
    block = bytearray(int(response) << 20)
    return float(len(block) > 0)

kept = []
def leaks(*, response, extra_info, **kwargs):
    """Keeps 60 MB more on each call (a cache that never forgets); notes which worker ran which call."""
    with open(extra_info["log"], "a") as f:
        f.write(f"{os.getpid()}:{response}\\n")
    kept.append(bytearray(60 << 20))
    return 1.0

'''


@pytest.fixture
def rfile(tmp_path):
    path = tmp_path / "policy_rewards.py"
    path.write_text(REWARDS)
    return str(path)


def _samples(responses, **info):
    return [{"prompt": "p", "response": r, "extra_info": dict(info)} for r in responses]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("pure", [False, True])
def test_each_sample_is_called_once_pure_or_not(rfile, tmp_path, pure):
    """Workers replaced after a timeout start fresh: no reward, pure or not, is called again on
    samples it already scored (the pool once replayed a pure reward's calls to warm new workers)."""
    log = tmp_path / "calls.log"
    responses = [f"r{i}" for i in range(80)] + ["hang"] + [f"s{i}" for i in range(40)]
    cfg = {"rewards": [{"path": rfile, "function": "logs_calls", "executor": "process", "timeout_s": 1,
                        "max_concurrency": 2, **({"pure": True} if pure else {})}]}
    with Runner.from_config(cfg) as runner:
        res = runner.score(_samples(responses, log=str(log)))
        res2 = runner.score(_samples([f"t{i}" for i in range(40)], log=str(log)))
    assert res.scores.count(1.0) == len(responses) - 1 and res2.scores.count(1.0) == 40
    assert sorted(log.read_text().splitlines()) == sorted(responses + [f"t{i}" for i in range(40)])


@pytest.mark.timeout(120)
def test_max_concurrency_one_runs_one_call_at_a_time(rfile, tmp_path):
    log = tmp_path / "spans.log"
    cfg = {"rewards": [{"path": rfile, "function": "spans", "executor": "process", "max_concurrency": 1}]}
    with Runner.from_config(cfg) as runner:
        res = runner.score(_samples([f"x{i}" for i in range(8)], log=str(log)))
        assert len(runner.worker_pids()) == 1
    assert res.scores == [1.0] * 8
    spans = sorted(
        (float(a), float(b)) for _, a, b in (line.split() for line in log.read_text().splitlines())
    )
    assert len(spans) == 8
    assert all(prev[1] <= nxt[0] for prev, nxt in zip(spans, spans[1:]))  # never two at once
    assert len({line.split()[0] for line in log.read_text().splitlines()}) == 1


@pytest.mark.timeout(120)
def test_workers_start_lazily(rfile, tmp_path):
    """A pool sized for 4 runs one sample with one process, not four."""
    cfg = {"rewards": [{"path": rfile, "function": "spans", "executor": "process", "max_concurrency": 4}]}
    with Runner.from_config(cfg) as runner:
        res = runner.score(_samples(["only"], log=str(tmp_path / "l.log")))
        assert res.scores == [1.0] and len(runner.worker_pids()) == 1


@pytest.mark.timeout(120)
def test_memory_limit_fails_the_call_that_passes_it(rfile):
    cfg = {"rewards": [{"path": rfile, "function": "allocates", "executor": "process", "memory_limit_mb": 200,
                        "on_failure": "nan"}]}
    with Runner.from_config(cfg) as runner:
        res = runner.score(_samples(["1", "600", "2"]))
    assert res.scores[0] == 1.0 and res.scores[2] == 1.0
    assert res.scores[1] != res.scores[1]  # NaN: failed
    assert "MemoryError" in res.errors[1]["allocates"]


@pytest.mark.timeout(120)
def test_a_worker_over_its_memory_limit_is_replaced(rfile, tmp_path):
    """A reward that leaks: the call that passes the limit fails, its worker is replaced, and the
    calls after it run on a fresh worker (they used to fail one after another on the full one).

    Which calls fail depends on how the pool spreads them (it may start a spare worker beside a busy
    one), so the test reads which worker ran each call: a worker fails at most one call, its last,
    and only after three that fit in 200 MB."""
    log = tmp_path / "calls.log"
    cfg = {"rewards": [{"path": rfile, "function": "leaks", "executor": "process",
                        "memory_limit_mb": 200, "on_failure": "nan"}]}
    with Runner.from_config(cfg, process_workers=1) as runner:
        res = runner.score(_samples([str(i) for i in range(12)], log=str(log)))
    failed = [i for i, s in enumerate(res.scores) if s != s]
    assert failed, "no call went over the limit"
    for i in failed:
        assert "MemoryError" in res.errors[i]["leaks"] and "replaced" in res.errors[i]["leaks"]
    calls: dict[str, list[int]] = {}
    for line in log.read_text().split():
        pid, _, i = line.partition(":")
        calls.setdefault(pid, []).append(int(i))
    for pid, mine in calls.items():
        bad = [i for i in mine if i in failed]
        assert bad in ([], [mine[-1]]), (pid, mine, failed)  # at most one failure, its last call
        assert not bad or len(mine) == 4, (pid, mine)  # three calls fit, the fourth does not
    assert sorted(i for mine in calls.values() for i in mine) == list(range(12))


def test_check_and_show_state_the_policy(cli, rfile, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        f"reward:\n  rewards:\n    - path: {rfile}\n      function: logs_calls\n      timeout_s: 2\n"
        f"    - path: {rfile}\n      function: spans\n      executor: process\n      pure: true\n"
    )
    res = cli("check", str(cfg), "--json")
    assert res.returncode == 0, res.stderr
    terms = json.loads(res.stdout)["terms"]
    assert [(t["executor"], t["pure"]) for t in terms] == [("process", False), ("process", True)]
    assert "timed out by killing its process" in terms[0]["executor_why"]
    res = cli("check", str(cfg))
    assert (
        "logs_calls: logs_calls" in res.stdout and "executor process (inline with timeout_s 2" in res.stdout
    )
    res = cli("show", "math_verify")
    if res.returncode == 0:  # rewardhub-math installed
        assert ["runs_on:", "process"] in [line.split() for line in res.stdout.splitlines()]
    assert os.path.exists(rfile)
