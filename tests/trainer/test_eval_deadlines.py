"""Evaluation calls are bounded and healed as training calls are (issue 43 §2): an evaluation actor that
stops (SIGSTOP) is replaced after trainer.call_timeout_s instead of stalling the run for ever, one that
dies is replaced instead of ending the run with a raw RayActorError; the reward pool's bound on a worker's
call nests under trainer.call_timeout_s; SIGTERM while the local Ray starts is one ERROR line."""

from __future__ import annotations

import json
import os
import signal
import sys

import pytest

from rewardhub_trainer.cli import train

VAL = [{"data_source": "simple_math", "prompt": [{"role": "user", "content": f"What is {i} + 1?"}],
        "reward_model": {"ground_truth": str(i + 1)}} for i in range(2)]


@pytest.mark.timeout(120)
def test_the_pool_bound_nests_under_call_timeout_s(model_cache, tiny_config):
    """64 samples a step on one reward worker, 60 s a call: the pool's own bound (30 + 64 x 60 s, three
    tries) reached hours, so call_timeout_s (1800 s) killed the whole reward client first. Now the pool's
    bound is a share of it; a pool bound set in the config raises call_timeout_s instead."""
    from rewardhub.config import load_plan
    from rewardhub_trainer.prepare import prepare
    from rewardhub_trainer.rewards import POOL_ATTEMPTS

    big = {"n": 4, "prompts_per_step": 16}
    prep = prepare(load_plan(tiny_config(rollout=big), ()))
    pool, call = prep.cfg.reward.workers.call_timeout_s, prep.cfg.trainer.call_timeout_s
    assert call == 1800 and pool is not None and pool * POOL_ATTEMPTS < call  # before: None (3870 s a try)
    assert prep.reward_setup.reward_cfg.workers.call_timeout_s == pool  # what the workers get
    small = prepare(load_plan(tiny_config(), ()))  # 8 samples: the pool's own bound (510 s) fits
    assert small.cfg.reward.workers.call_timeout_s is None
    own = prepare(load_plan(tiny_config(rollout=big, reward={"workers": {"call_timeout_s": 1000}}), ()))
    assert own.cfg.reward.workers.call_timeout_s == 1000
    assert own.cfg.trainer.call_timeout_s >= 1000 * POOL_ATTEMPTS  # before: 1800, under the pool's tries


@pytest.mark.ray
@pytest.mark.timeout(420)
def test_an_evaluation_actor_that_stops_or_dies_is_replaced(ray_session, tiny_config, tmp_path, capfd):
    val = tmp_path / "val.jsonl"
    val.write_text("".join(json.dumps(r) + "\n" for r in VAL))
    faults: list[tuple[int, int]] = []

    def fault(step, metrics, run):  # after step 1's evaluation the evaluator is up: stop it, then kill it
        if step in (2, 3):
            pid = run.evaluator.infos()[0]["pid"]
            sig = signal.SIGSTOP if step == 2 else signal.SIGKILL
            os.kill(pid, sig)
            faults.append((pid, sig))

    cfg = tiny_config(trainer={"total_steps": 3, "test_freq": 1, "call_timeout_s": 15, "max_restarts": 2},
                      data={"val_files": str(val)})
    try:
        summary = train(cfg, output=str(tmp_path / "o"), callbacks=[fault])
    finally:
        for pid, _ in faults:  # never leave a frozen process behind
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    err = capfd.readouterr().err
    assert [pid for pid, _ in faults] and faults[0][0] != faults[1][0]  # the stopped one was replaced
    assert summary["steps"] == 3 and [v["step"] for v in summary["val"]] == [1, 2, 3]
    assert all(v["val/samples"] == 2.0 for v in summary["val"])
    assert ("WARNING: evaluator: not answered within 15s (trainer.call_timeout_s); replaced by a fresh "
            "one") in err
    assert "RayActorError" not in err and "Traceback" not in err


@pytest.mark.timeout(180)
def test_sigterm_while_the_local_ray_starts_is_one_error_line(model_cache, tiny_config, tmp_path, monkeypatch,
                                                              capfd):
    """``ray.init`` puts its own SIGTERM handler (``sys.exit(15)``) in place first thing: a SIGTERM while
    it starts the local Ray exited 15 with no ERROR line. Where the signal lands in those seconds cannot
    be chosen from outside, so Ray's start is replaced by what it does then: its handler set, a SIGTERM
    received. It is a SIGTERM like any other: ``ERROR: terminated``, 143, no folder left behind."""
    import argparse

    from rewardhub_trainer import cli

    def ray_starts() -> None:  # ray.init's first step (ray/_private/worker.py), then the signal
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(cli, "_start_ray", ray_starts)
    old = signal.getsignal(signal.SIGTERM)
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    args = parser.parse_args([tiny_config(), "--output", str(tmp_path / "o"), "--no-progress"])
    try:
        rc = cli.run(args)
    finally:
        signal.signal(signal.SIGTERM, old)
    assert rc == 143
    assert capfd.readouterr().err.strip().splitlines()[-1] == "ERROR: terminated"
    assert not (tmp_path / "o").exists()
