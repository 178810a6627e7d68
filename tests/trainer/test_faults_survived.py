"""Faults a run survives: an extreme behaviour logprob, a model folder whose generation config sets a
repetition penalty, a stopped reward worker (restarted, the run goes on)."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import time
from pathlib import Path

import pytest
from faults_helpers import SPS
from faults_helpers import _check_accounting
from faults_helpers import _pid_of
from faults_helpers import _rows

from rewardhub_trainer.cli import train

pytestmark = pytest.mark.ray


def _final_weights(out: Path, step: int) -> dict:
    from safetensors.torch import load_file

    return load_file(out / "checkpoints" / f"step_{step:06d}" / "model.safetensors")


@pytest.mark.timeout(240)
def test_an_extreme_behaviour_logprob_in_a_run_leaves_the_weights_finite(ray_session, tiny_config, tmp_path):
    """From step 2 on, the rollouter records one token's log-prob as -1e30 in every batch (patched into
    its engine from outside, as a broken engine would): the learner's clamped log-ratio keeps every
    update finite, nothing is skipped, and the run ends with finite weights and exact accounting."""
    import ray
    import torch

    def corrupt(actor) -> None:  # runs in a rollouter
        sample = actor.engine.generate

        def generate(*args, **kwargs):
            groups = sample(*args, **kwargs)
            groups[0][0].logprobs[0] = -1e30
            return groups

        actor.engine.generate = generate

    def corrupt_after_step_1(step, metrics, run):
        if step == 1:
            ray.get([h.__ray_call__.remote(corrupt) for h in run.fleet.rollouters.pool.handles])

    out = tmp_path / "o"
    t0 = time.monotonic()
    summary = train(tiny_config(trainer={"mode": "sync", "total_steps": 4}), output=str(out),
                    callbacks=[corrupt_after_step_1])
    assert time.monotonic() - t0 < 200
    rows = _rows(out)
    _check_accounting(summary, rows)
    # the extreme value reached the learner: one token's ratio is exp(clamp) in steps 2..4, not before
    assert rows[0]["ratio/mean"] < 10 and all(r["ratio/mean"] > 1e3 for r in rows[1:])
    assert all(r["optim/skipped_steps"] == 0 for r in rows)
    assert all(math.isfinite(r[k]) for r in rows for k in ("loss/policy", "grad_norm"))
    assert [r["policy_version"] for r in rows] == [0, 1, 2, 3]
    weights = _final_weights(out, 4)
    assert all(bool(torch.isfinite(w).all()) for w in weights.values())


@pytest.mark.timeout(240)
def test_a_model_folder_whose_generation_config_sets_a_repetition_penalty_trains_without_it(
        ray_session, tiny_config, tmp_path, model_cache, capsys):
    """The folder's generation_config.json asks for repetition_penalty=3.0: the rollouters sample
    without it (and say so), and the run is the run of the same model without that file's setting:
    the same responses' rewards and lengths step by step, with exact accounting."""
    from rewardhub_trainer.config import ModelConfig
    from rewardhub_trainer.models import materialize

    base = materialize(ModelConfig(tiny={"arch": "qwen2", "hidden_size": 64, "num_hidden_layers": 2,
                                         "num_attention_heads": 2, "num_key_value_heads": 1}))
    plain, leaky = tmp_path / "plain", tmp_path / "leaky"
    shutil.copytree(base, plain)
    shutil.copytree(base, leaky)
    gen = leaky / "generation_config.json"
    gen.write_text(json.dumps({**json.loads(gen.read_text()), "repetition_penalty": 3.0}))
    runs = {}
    for folder in (plain, leaky):
        out = tmp_path / f"o-{folder.name}"
        capsys.readouterr()
        t0 = time.monotonic()
        summary = train(tiny_config(trainer={"mode": "sync", "total_steps": 3},
                                    model={"tiny": None, "path": str(folder)}), output=str(out))
        assert time.monotonic() - t0 < 100
        runs[folder.name] = _rows(out)
        _check_accounting(summary, runs[folder.name])
        notes = [line for line in capsys.readouterr().err.splitlines() if "generation_config.json" in line]
        assert notes == ([] if folder is plain else [
            "note: the model folder's generation_config.json sets repetition_penalty=3.0; ignored: rollouts "
            "sample with the rollout.* settings only"])
    keys = ("reward/mean", "response_len/mean", "batch_index")
    assert [[r[k] for k in keys] for r in runs["leaky"]] == [[r[k] for k in keys] for r in runs["plain"]]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", ["sync", "fully_async"])
def test_a_stopped_reward_worker_is_restarted_and_the_run_goes_on(ray_session, tiny_config, tmp_path, capsys,
                                                                  mode):
    """The reward worker is SIGSTOPped after step 2 (as a partitioned node, or a reward model stuck in a
    kernel): the run waited for ever with no line. Its call is bounded by reward.workers.call_timeout_s:
    the worker is killed, restarted and its chunk re-scored, with one WARNING line naming it."""
    stopped: list[int] = []

    def stop_reward_worker(step, metrics, run):
        if step == 2 and not stopped:
            stopped.append(_pid_of(run, "reward_worker"))
            os.kill(stopped[0], signal.SIGSTOP)

    out = tmp_path / "o"
    cfg = tiny_config(trainer={"mode": mode, "total_steps": 5}, reward={"workers": {"call_timeout_s": 5}})
    try:
        summary = train(cfg, output=str(out), callbacks=[stop_reward_worker])
    finally:
        for pid in stopped:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    err = capsys.readouterr().err
    rows = _rows(out)
    _check_accounting(summary, rows)
    assert summary["restarts"]["reward_worker"] == 1 and summary["rescored_samples"] == SPS
    assert all(r["samples/invalid"] == 0 for r in rows)  # every sample got a score
    # the pool's figures are the run's metrics: the worker replaced and its chunk sent again
    assert rows[-1]["reward_workers/reward/replicas_replaced"] == 1, rows[-1]
    assert rows[-1]["reward_workers/reward/calls_redispatched"] >= 1
    assert rows[-1]["reward_workers/reward/workers_now"] == rows[0]["reward_workers/reward/workers_max"] == 1
    lines = [x for x in err.splitlines() if x.startswith("WARNING: reward worker 0 of pool 'reward'")]
    assert len(lines) == 1, err
    assert f"(pid {stopped[0]}) did not answer a chunk of {SPS} samples within 5s" in lines[0], lines
    assert "(reward 'regex_match';" in lines[0]
