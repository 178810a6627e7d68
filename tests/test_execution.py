"""The runner's failure policies, executors, reward kinds, composition and metrics."""

from __future__ import annotations

import math
import os
import time

import pytest

from rewardhub.errors import RewardExecutionError
from rewardhub.errors import UsageError
from rewardhub.execution import Runner
from rewardhub.types import ExecutionPolicy

MOD = "rewards_for_tests"


@pytest.fixture(autouse=True)
def _tests_on_path(monkeypatch):
    monkeypatch.syspath_prepend(os.path.dirname(__file__))


def term(function, **kw):
    """A term of the test rewards; failures score 0.0 here (``on_failure: zero``) unless ``kw`` says
    otherwise."""
    return {"module": MOD, "function": function, "on_failure": "zero", **kw}


def run(terms, samples, **kw):
    with Runner.from_config({"rewards": terms, **kw}) as r:
        return r.score(samples), r


def samples_of(*responses, **extra):
    return [
        {"prompt": "p", "response": x, "ground_truth": None, "data_source": "d", "extra_info": dict(extra)}
        for x in responses
    ]


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purposes
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _die(*pids, limit_s=30.0):
    """Whether the processes are all gone, waited for up to ``limit_s`` (a SIGKILL takes effect soon but
    not at once; the limit only catches a process that was never killed)."""
    end = time.monotonic() + limit_s
    while any(_alive(p) for p in pids):
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


def _children(pid):
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    fields = f.read().split(")")[-1].split()
                if int(fields[1]) == pid and fields[0] != "Z":
                    out.append(int(d))
            except (FileNotFoundError, ProcessLookupError):
                pass
    return out


def test_hang_is_killed_pool_heals_no_orphans(tmp_path):
    pidfile = tmp_path / "pids"
    batch = samples_of("ok:1", "hang", "ok:2", "ok:3", "ok:4", pidfile=str(pidfile))
    runner = Runner.from_config({"rewards": [term("misbehave", timeout_s=2, executor="process",
                                                  max_concurrency=2)]})
    res = runner.score(batch)  # returns at all: the hang never ends by itself
    assert res.rewards[1]["misbehave"] == 0.0  # on_failure: zero
    assert [res.scores[i] for i in (0, 2, 3, 4)] == [1.0, 2.0, 3.0, 4.0]
    assert res.metrics["rewards/misbehave/timeouts"] == 1.0
    assert "timed out after 2s" in res.errors[1]["misbehave"]
    worker_pid, grandchild = map(int, pidfile.read_text().split())
    assert _die(worker_pid, grandchild)
    assert runner._pool is not None and runner._pool.kills == 1
    assert len(runner.worker_pids()) == 2 and worker_pid not in runner.worker_pids()
    # the healed pool serves the next batch
    again = runner.score(samples_of("ok:5", "ok:6"))
    assert again.scores == [5.0, 6.0]
    pids = runner.worker_pids()
    before = set(_children(os.getpid()))
    assert set(pids) <= before
    runner.close()
    assert _die(*pids)
    assert not set(pids) & set(_children(os.getpid()))


@pytest.mark.parametrize(
    ("response", "message"),
    [
        ("raise", "RuntimeError: boom"),
        ("nan", "returned nan: not a finite number"),
        ("inf", "returned inf: not a finite number"),
        ("string", "returned '0.5': not a finite number"),
        ("baddict", "returned a dict without 'score'"),
        ("sigkill", "reward worker process died (signal 9)"),
        ("exit", "reward worker process died (exit code 3)"),
    ],
)
@pytest.mark.parametrize("on_failure", ["zero", "nan", "drop"])
def test_failures_get_their_policy_value(response, message, on_failure):
    res, runner = run([term("misbehave", executor="process", on_failure=on_failure, max_concurrency=2)],
                      samples_of("ok:1", response, "ok:2"))
    got = res.rewards[1]["misbehave"]
    expected = {"zero": 0.0, "drop": None}.get(on_failure)
    if on_failure == "nan":
        assert math.isnan(got)
    else:
        assert got == expected
    assert res.scores[0] == 1.0 and res.scores[2] == 2.0
    assert message in res.errors[1]["misbehave"] and "sample 1" in res.errors[1]["misbehave"]
    assert res.metrics["rewards/misbehave/errors"] == 1.0
    assert len(res.scores) == 3


def test_a_failure_is_nan_unless_the_reward_or_its_term_says_otherwise():
    """Failures are never scores: with no on_failure anywhere a failed call is NaN (an invalid
    sample), and counted; a term's on_failure (here zero) still wins."""
    assert ExecutionPolicy().on_failure == "nan"
    plain = {"module": MOD, "function": "misbehave"}
    res, _ = run([plain], samples_of("ok:1", "raise", "ok:2"))
    assert math.isnan(res.scores[1]) and math.isnan(res.rewards[1]["misbehave"])
    assert res.scores[0] == 1.0 and res.scores[2] == 2.0
    assert res.metrics["rewards/misbehave/errors"] == 1.0 and "sample 1" in res.errors[1]["misbehave"]
    res, _ = run([{**plain, "on_failure": "zero"}], samples_of("ok:1", "raise"))
    assert res.scores == [1.0, 0.0]


def test_a_reward_execution_error_survives_pickling():
    import pickle

    err = pickle.loads(
        pickle.dumps(RewardExecutionError("reward 'r' on sample 3: boom", reward="r", index=3))
    )
    assert (str(err), err.reward, err.index) == ("reward 'r' on sample 3: boom", "r", 3)


def test_on_failure_raise_names_reward_and_sample():
    with pytest.raises(
        RewardExecutionError, match=r"reward 'misbehave' on sample 1: .*RuntimeError: boom"
    ) as e:
        run([term("misbehave", on_failure="raise")], samples_of("ok:1", "raise"))
    assert e.value.reward == "misbehave" and e.value.index == 1


@pytest.mark.parametrize("executor", ["inline", "thread", "process"])
def test_outcomes_carry_the_callers_sample_index(executor):
    """A part of a larger batch (what a Ray reward worker scores) names the samples by their
    place in that batch, in messages and as the outcomes' ``index``."""
    with Runner.from_config({"rewards": [term("misbehave", executor=executor, on_failure="nan"),
                                         term("bad_batched", kind="batched", executor=executor)]}) as r:
        res = r.score(samples_of("ok:1", "raise", "string"), indices=[40, 41, 42])
    outs = res.outcomes["misbehave"]
    assert [o.index for o in outs] == [40, 41, 42]
    assert "reward 'misbehave' on sample 41: RuntimeError: boom" in res.errors[1]["misbehave"]
    assert "reward 'misbehave' on sample 42 returned '0.5'" in res.errors[2]["misbehave"]
    assert "(sample 40)" in res.errors[0]["bad_batched"]
    assert "sample 1" not in res.errors[1]["misbehave"]


def test_ray_terms_need_a_ray_executor():
    with Runner.from_config({"rewards": [term("misbehave", executor="ray")]}) as r:
        with pytest.raises(UsageError, match="runner_from_config"):
            r.score(samples_of("ok:1"))


@pytest.mark.parametrize("executor", ["inline", "thread", "process"])
def test_retries_recover_a_flaky_reward(tmp_path, executor):
    res, _ = run([term("flaky", executor=executor, retries=1)],
                 samples_of("a", counter=str(tmp_path / "c")))
    assert res.scores == [1.0] and res.errors == [{}]


def test_thread_timeout_reports_and_frees_the_slot():
    # the hung call sleeps an hour: that the batch is done at all shows its slot was freed at the timeout
    res, runner = run([term("slow_or_hang", executor="thread", timeout_s=0.5, max_concurrency=1)],
                      samples_of("hang", "a", "b"))
    assert res.rewards[0]["slow_or_hang"] == 0.0 and res.scores[1:] == [1.0, 1.0]
    assert res.metrics["rewards/slow_or_hang/timeouts"] == 1.0
    assert "cannot be killed" in res.errors[0]["slow_or_hang"]
    assert runner.abandoned_threads == 1


def test_inline_with_timeout_runs_in_a_killable_process():
    res, runner = run([term("slow_or_hang", timeout_s=1)], samples_of("hang", "a"))
    assert runner.facts[0].executor == "process"
    assert res.scores == [0.0, 1.0]


@pytest.mark.parametrize("executor", ["inline", "thread", "process"])
def test_async_rewards_and_async_callables(executor):
    res, _ = run([term("async_len", executor=executor, timeout_s=1), term("async_obj", executor=executor)],
                 samples_of("abc", "hang", "x"))
    assert res.rewards[0] == {"async_len": 3.0, "async_obj": 1.0}
    assert res.rewards[1]["async_len"] == 0.0 and res.metrics["rewards/async_len/timeouts"] == 1.0
    assert res.rewards[2] == {"async_len": 1.0, "async_obj": 1.0}


def test_async_inline_is_concurrent():
    """Inline async calls of one batch are awaited side by side (counted, not timed: sequential calls
    would never overlap)."""
    import rewards_for_tests

    rewards_for_tests.in_flight.update(now=0, peak=0)
    res, _ = run([term("async_overlap", max_concurrency=50)], samples_of(*["a"] * 40))
    assert res.scores == [1.0] * 40
    assert rewards_for_tests.in_flight["peak"] == 40


@pytest.mark.parametrize("executor", ["inline", "process"])
def test_batched_and_group_kinds(executor):
    batch = samples_of("a", "bbb", "cc", "dddd")
    for i, s in enumerate(batch):
        s["extra_info"]["uid"] = i // 2
    res, _ = run([term("batched_len", kind="batched", executor=executor),
                  term("group_rank", kind="group", executor=executor)], batch)
    assert [r["batched_len"] for r in res.rewards] == [1.0, 3.0, 2.0, 4.0]
    assert [r["group_rank"] for r in res.rewards] == [0.0, 1.0, 0.0, 1.0]


def test_batched_wrong_length_is_an_error_per_sample():
    res, _ = run([term("bad_batched", kind="batched")], samples_of("a", "b"))
    assert res.scores == [0.0, 0.0]
    assert "returned list of length 1 for 2 samples" in res.errors[0]["bad_batched"]


def test_none_is_not_applicable_and_dicts_keep_extras():
    res, _ = run([term("misbehave")], samples_of("none", "dict"))
    assert res.scores == [None, 0.25]
    assert res.extra[1] == {"misbehave": {"length": 4}}
    assert res.metrics["rewards/misbehave/count"] == 1.0 and res.metrics["rewards/misbehave/length"] == 4.0


def test_verl_and_trl_signatures_called_unchanged():
    batch = [{"prompt": "p", "response": " 42 ", "ground_truth": "42"},
             {"prompt": "p", "response": "7", "ground_truth": "42"}]
    res, runner = run([term("verl_style"), term("trl_style")], batch)
    assert [r["verl_style"] for r in res.rewards] == [1.0, 0.0]
    assert [r["trl_style"] for r in res.rewards] == [1.0, 0.0]
    assert [f.adapter for f in runner.facts] == ["verl", "trl"]


def test_weights_routing_and_aggregations():
    batch = [{"response": "ok:1", "data_source": "math"}, {"response": "ok:3", "data_source": "code",
                                                            "extra_info": {"tags": ["hard"]}}]
    terms = [term("misbehave", weight=2.0, data_sources=["math"]),
             term("batched_len", kind="batched", weight=0.5, alias="len"),
             term("misbehave", alias="hard_only", tags=["hard"])]
    res, _ = run(terms, batch)
    assert res.rewards[0] == {"misbehave": 1.0, "len": 4.0, "hard_only": None}
    assert res.rewards[1] == {"misbehave": None, "len": 4.0, "hard_only": 3.0}
    assert res.scores == [2.0 * 1 + 0.5 * 4, 0.5 * 4 + 3.0]
    res, _ = run([term("misbehave")], samples_of("ok:1", "ok:3"), aggregation="normalize_then_sum")
    assert res.scores == [-1.0, 1.0]


def test_metrics_have_every_key():
    res, _ = run([term("misbehave")], samples_of("ok:1", "ok:2", "raise"))
    m = res.metrics
    for key in ("mean", "std", "count", "errors", "timeouts", "latency_p50", "latency_p99"):
        assert f"rewards/misbehave/{key}" in m
    assert m["rewards/misbehave/mean"] == 1.0 and m["rewards/misbehave/errors"] == 1.0
    assert m["reward/mean"] == 1.0


def test_bad_inputs_are_named():
    with pytest.raises(UsageError, match=r"sample 1 has no 'response'"):
        run([term("misbehave")], [{"response": "ok:1"}, {"prompt": "x"}])
    with pytest.raises(UsageError, match=r"reward.aggregation='mean' is not valid\nallowed: weighted_sum"):
        run([term("misbehave")], [], aggregation="mean")
    with pytest.raises(
        UsageError, match=r"on_failure='ignore' is not valid\nallowed: zero, nan, drop, raise"
    ):
        run([term("misbehave", on_failure="ignore")], [])
    with pytest.raises(
        UsageError, match=r"reward.rewards names 'misbehave' more than once\ngive each term a distinct"
    ):
        run([term("misbehave"), term("misbehave")], [])  # a raw section: the config's validator says so
    with pytest.raises(UsageError, match="reward.rewards is empty"):
        run([], [])


def test_every_sample_one_row_with_many_failures():
    responses = ["ok:1", "raise", "nan", "sigkill", "ok:2", "string", "none"] * 5
    res, _ = run([term("misbehave", executor="process", max_concurrency=2)], samples_of(*responses))
    assert len(res.scores) == len(responses) == len(res.rewards)
    assert res.scores[0::7] == [1.0] * 5 and res.scores[4::7] == [2.0] * 5
