"""The process pool pairs every answer with the call it answers: a reward whose answer cannot be
read, one that dies mid-answer, or one that answers twice fails its own sample only, and the
worker's later answers go to the right samples."""

from __future__ import annotations

import math

import pytest

from rewardhub.execution import Runner

REWARDS = '''
import os, pickle, struct, sys, time, types


def _refuse():
    raise RuntimeError("this value cannot be rebuilt here")


def _exit():
    raise SystemExit(3)


class Unreadable:
    def __reduce__(self):
        return (_refuse, ())


class Exits:
    def __reduce__(self):
        return (_exit, ())


def _worker_loop():
    """The worker loop's frame: its connection to the pool, and the number of the running call."""
    f = sys._getframe()
    while f is not None and f.f_code.co_name != "worker_main":
        f = f.f_back
    return f.f_locals


def _worker_conn():
    return _worker_loop()["conn"]


def tricky(*, response, **kwargs):
    if response == "unreadable":  # pickled here, and raises when the scoring process unpickles it
        return Unreadable()
    if response == "exits":  # its value ends the process that rebuilds it
        return Exits()
    if response == "ghost":  # a class of a module that only this worker has
        ghost = types.ModuleType("rewardhub_ghost_module")
        exec("class Score(float):\\n    pass\\n", ghost.__dict__)
        sys.modules["rewardhub_ghost_module"] = ghost
        return ghost.Score(7.0)
    if response == "dies":  # half an answer, then the worker is gone
        os.write(_worker_conn().fileno(), struct.pack("!i", 1000) + b"half an answer")
        os._exit(3)
    if response == "twice":  # an extra answer before its own
        _worker_conn().send(("ok", 1000.0, 0.0, time.monotonic()))
    if response == "echo":  # its own answer, sent twice (the second is dropped)
        loop = _worker_loop()
        loop["conn"].send((loop["j"], "ok", pickle.dumps(4.0), 0.0, time.monotonic(), False))
    return float(len(response))
'''


@pytest.fixture
def rfile(tmp_path):
    path = tmp_path / "answer_rewards.py"
    path.write_text(REWARDS)
    return str(path)


def _samples(responses):
    return [{"prompt": "p", "response": r} for r in responses]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("bad", ["unreadable", "exits", "ghost", "dies", "twice", "echo"])
def test_a_bad_answer_fails_its_own_sample_and_later_answers_stay_paired(rfile, bad):
    cfg = {"rewards": [{"path": rfile, "function": "tricky", "executor": "process", "on_failure": "nan"}]}
    with Runner.from_config(cfg, process_workers=1) as runner:
        res = runner.score(_samples(["a", "bb", bad, "dddd", "eeeee"]))
        assert res.scores[:2] == [1.0, 2.0] and res.scores[3:] == [4.0, 5.0]
        if bad == "echo":  # its first answer counts, the copy is dropped
            assert res.scores[2] == 4.0 and runner._pool.strays == 1
        else:
            assert math.isnan(res.scores[2])  # its on_failure value, never another sample's number
            assert res.metrics["rewards/tricky/errors"] == 1.0
            assert "tricky" in res.errors[2]
        for _ in range(3):  # the same worker (or its replacement) answers the next batches right
            again = runner.score(_samples(["x", "xx", "xxx", "xxxx", "xxxxx"]))
            assert again.scores == [1.0, 2.0, 3.0, 4.0, 5.0]
            assert again.metrics["rewards/tricky/errors"] == 0.0
