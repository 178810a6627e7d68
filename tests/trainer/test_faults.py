"""Faults from outside the run: signals, a model folder that changes on disk, numbers that overflow
(a learning rate, a reward scale).

Each run either finishes with exact accounting or stops with one error naming the process, within
a time bound. Samples are counted from the per-step metrics rows (``samples/step``), not from the
counters the summary reports.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
import time

import pytest
from faults_helpers import SPS
from faults_helpers import _check_accounting
from faults_helpers import _pid_of
from faults_helpers import _rows

from rewardhub_trainer.cli import train
from rewardhub_trainer.faults import RunAborted

pytestmark = pytest.mark.ray


def _wait_gone(pid: int, timeout: float = 10.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    raise AssertionError(f"pid {pid} still alive")


@pytest.mark.timeout(240)
@pytest.mark.parametrize("mode", ["sync", "fully_async"])
def test_learner_killed_restarts_from_its_latest_checkpoint(ray_session, tiny_config, tmp_path, mode):
    killed: list[int] = []

    def kill_learner(step, metrics, run):
        if step == 3 and not killed:  # the latest checkpoint is step 2
            pid = _pid_of(run, "learner")
            os.kill(pid, signal.SIGKILL)
            _wait_gone(pid)
            killed.append(pid)

    out = tmp_path / "o"
    t0 = time.monotonic()
    summary = train(tiny_config(trainer={"mode": mode, "total_steps": 6, "checkpoint_every": 2,
                                         "checkpoint_keep": 2}),
                    output=str(out), callbacks=[kill_learner])
    assert time.monotonic() - t0 < 200
    assert len(killed) == 1 and summary["steps"] == 6
    assert summary["restarts"]["learner"] == 1
    [restore] = summary["learner_restores"]
    assert restore["at_step"] == 3 and restore["to_step"] == 2
    assert restore["checkpoint"].endswith("step_000002")
    learner = [w for w in summary["workers"] if w["role"] == "learner"]
    assert len(learner) == 1 and learner[0]["pid"] != killed[0]
    rows = _rows(out)
    _check_accounting(summary, rows)
    # step 3 was trained, then lost with the learner: done again from batch 2, data order unchanged
    assert [r["batch_index"] for r in rows] == list(range(6))
    assert summary["samples_lost_on_restart"] >= SPS
    if mode == "sync":  # nothing else was in flight: exactly one batch generated twice
        assert summary["samples_lost_on_restart"] == SPS
        assert summary["samples_generated"] == 7 * SPS and summary["samples_unused_at_end"] == 0
    # the policy version counts optimizer updates and went back with the checkpoint
    assert [r["policy_version"] for r in rows] == [r["step"] - 1 - r["staleness"] for r in rows]
    ckpts = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert ckpts == ["latest", "step_000004", "step_000006"]  # keep 2, nothing half-written left


def _stop_then_kill(pid: int, after: float) -> None:
    """Freeze ``pid`` now and SIGKILL it ``after`` seconds later: calls sent meanwhile die in flight."""
    os.kill(pid, signal.SIGSTOP)
    threading.Timer(after, os.kill, (pid, signal.SIGKILL)).start()


@pytest.mark.timeout(240)
@pytest.mark.parametrize("mode", ["sync", "fully_async"])
def test_rollouter_killed_during_a_weight_sync_gets_the_weights_again(
    ray_session, tiny_config, tmp_path, mode
):
    killed: list[int] = []

    def freeze_rollouter(step, metrics, run):
        if step == 2 and not killed:  # the driver sends the step-2 weights right after this
            pid = _pid_of(run, "rollouter")
            _stop_then_kill(pid, 2.0)
            killed.append(pid)

    out = tmp_path / "o"
    t0 = time.monotonic()
    summary = train(tiny_config(trainer={"mode": mode, "total_steps": 6}), output=str(out),
                    callbacks=[freeze_rollouter])
    assert time.monotonic() - t0 < 200
    _wait_gone(killed[0])
    assert summary["steps"] == 6
    assert summary["weight_sync_failures"] >= 1  # the acknowledgement came back failed, and was seen
    assert summary["restarts"]["rollouter"] >= 1
    assert killed[0] not in [w["pid"] for w in summary["workers"] if w["role"] == "rollouter"]
    rows = _rows(out)
    _check_accounting(summary, rows)
    assert [r["batch_index"] for r in rows] == list(range(6))
    # no batch after the kill was generated with the base weights: all within the staleness bound
    assert all(r["staleness"] <= summary["staleness_limit"] for r in rows)
    assert summary["samples_dropped_stale"] == 0


@pytest.mark.timeout(240)
def test_rollouter_that_cannot_take_weights_stops_the_run_naming_it(ray_session, tiny_config, tmp_path,
                                                                    model_cache):
    """The model folder changes on disk (a node with another copy): restarted rollouters cannot load the
    weights."""
    from rewardhub_trainer.config import ModelConfig
    from rewardhub_trainer.models import materialize

    folder = tmp_path / "model"
    shutil.copytree(
        materialize(
            ModelConfig(
                tiny={
                    "arch": "qwen2",
                    "hidden_size": 64,
                    "num_hidden_layers": 2,
                    "num_attention_heads": 2,
                    "num_key_value_heads": 1,
                }
            )
        ),
        folder,
    )
    killed: list[int] = []

    def change_model_then_kill(step, metrics, run):
        if step == 2 and not killed:
            config = json.loads((folder / "config.json").read_text())
            config["num_hidden_layers"] = 3  # still loads, but has weights the learner does not send
            config["layer_types"] = config.get("layer_types", ["full_attention"] * 2)[:1] * 3
            (folder / "config.json").write_text(json.dumps(config))
            pid = _pid_of(run, "rollouter")
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    cfg = tiny_config(trainer={"mode": "fully_async", "total_steps": 30, "weight_sync_retries": 2},
                      model={"tiny": None, "path": str(folder)})
    t0 = time.monotonic()
    with pytest.raises(RunAborted) as info:
        train(cfg, output=str(tmp_path / "o"), callbacks=[change_model_then_kill])
    assert time.monotonic() - t0 < 200
    message = str(info.value)
    assert message.startswith("rollouter 0: weight sync failed: ")
    assert "model.layers.2." in message and "3 times in a row" in message
    assert "\n" not in message  # printed by the CLI as one `ERROR: ...` line
    assert len(killed) == 1
    rows = _rows(tmp_path / "o")
    assert 2 <= len(rows) < 30  # it stopped early, and nothing trained after the fault is missing a row


@pytest.mark.timeout(240)
@pytest.mark.parametrize(("lr", "error"), [
    # the first update is finite but huge: the rollouter's logits overflow when it samples with it
    (1e37, r"^rollouter 0: generate failed: RuntimeError: probability tensor contains either `inf`, `nan`"),
    # the optimizer cannot even represent its step
    (1e39, r"^learner: train failed: RuntimeError: value cannot be converted to type float without overflow"),
], ids=["overflowing-weights", "overflowing-step"])
def test_a_learning_rate_that_overflows_stops_the_run_with_one_named_error(ray_session, tiny_config, tmp_path,
                                                                           lr, error):
    cfg = tiny_config(trainer={"mode": "sync", "total_steps": 6, "lr": lr})
    out = tmp_path / "o"
    t0 = time.monotonic()
    with pytest.raises(RunAborted, match=error) as info:
        train(cfg, output=str(out))
    assert time.monotonic() - t0 < 200
    assert "\n" not in str(info.value)
    assert len(_rows(out)) == (1 if lr < 1e38 else 0)
    assert not (out / "summary.json").exists()


@pytest.mark.timeout(240)
@pytest.mark.parametrize("mode", ["sync", "fully_async"])
def test_updates_that_are_never_finite_stop_the_run_and_reach_no_rollouter(
    ray_session, tiny_config, tmp_path, mode
):
    """An extreme reward scale without advantage scaling: every response scores a random fraction of
    1e45, so its advantage (reward - group mean) is past float32's range and every loss is non-finite.
    Each update is skipped, and the third in a row stops the run (trainer.max_nonfinite_steps)."""
    import ray

    def weights_of(actor) -> tuple[bool, float]:  # runs in a rollouter (a nested function travels by value)
        import torch

        params = [p for p in actor.engine.model.state_dict().values() if p.is_floating_point()]
        return all(bool(torch.isfinite(p).all()) for p in params), float(
            sum(p.double().sum() for p in params)
        )

    held: list[list[tuple[bool, float]]] = []

    def rollouter_weights(step, metrics, run):
        held.append(ray.get([h.__ray_call__.remote(weights_of) for h in run.fleet.rollouters.pool.handles]))

    (tmp_path / "huge.py").write_text("import random\n\ndef huge(*, response, **kw):\n"
                                      "    return random.random() * 1e45\n")
    cfg = tiny_config(
        trainer={"mode": mode, "total_steps": 12, "max_nonfinite_steps": 3, "scale_advantages": False},
        reward={"rewards": [{"path": str(tmp_path / "huge.py"), "function": "huge"}]},
    )
    out = tmp_path / "o"
    t0 = time.monotonic()
    with pytest.raises(RunAborted) as info:
        train(cfg, output=str(out), callbacks=[rollouter_weights])
    assert time.monotonic() - t0 < 200
    assert str(info.value) == ("learner: 3 optimizer updates in a row skipped (non-finite loss or gradient, "
                               "step 3); lower trainer.lr or check the rewards")
    rows = _rows(out)
    assert [r["step"] for r in rows] == [1, 2, 3]  # the step that stops the run is recorded too
    assert [r["optim/skipped_steps"] for r in rows] == [1, 1, 1]
    assert [r["optim/nonfinite_in_row"] for r in rows] == [1, 2, 3]
    assert all(r["policy_version"] == 0 for r in rows)  # every batch sampled with the base weights
    assert not (out / "summary.json").exists()
    # what the rollouters held after each step (the callbacks of steps 1 and 2): finite, and the base
    # weights still (a skipped update changes nothing, and nothing else was sent)
    assert len(held) == 2 and all(finite for step in held for finite, _ in step)
    assert len({total for step in held for _, total in step}) == 1


@pytest.mark.timeout(240)
def test_batches_dropped_as_stale_in_a_row_stop_the_run(ray_session, tiny_config, tmp_path):
    """No staleness gate, a sync every 3 steps and no staleness allowed: batches arrive too old."""
    cfg = tiny_config(
        trainer={
            "mode": "fully_async",
            "total_steps": 12,
            "staleness_limit": 0,
            "sync_interval": 3,
            "staleness_gate": False,
            "max_stale_batches": 1,
        }
    )
    with pytest.raises(RunAborted, match=r"^message queue: dropped 1 batch\(es\) in a row as stale "
                                         r"\(trainer.staleness_limit=0\); raise trainer.staleness_limit"):
        train(cfg, output=str(tmp_path / "o"))
    rows = _rows(tmp_path / "o")
    assert len(rows) < 12 and all(r["stale/batches_in_a_row"] == 0 for r in rows)


@pytest.mark.timeout(240)
def test_a_used_reward_missing_on_the_reward_workers_stops_the_run_naming_it(
    ray_session, tiny_config, tmp_path, monkeypatch
):
    """A reward module importable in the driver only (not on the workers' path): named with the node."""
    (tmp_path / "driver_only_rewards.py").write_text(
        "def digit(data_source, solution_str, ground_truth, extra_info=None, **kw):\n"
        "    return float(any(c.isdigit() for c in solution_str))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = tiny_config(trainer={"mode": "fully_async", "total_steps": 3},
                      reward={"rewards": [{"module": "driver_only_rewards", "function": "digit"}]})
    t0 = time.monotonic()
    with pytest.raises(RunAborted) as info:
        train(cfg, output=str(tmp_path / "o"))
    assert time.monotonic() - t0 < 200
    message = str(info.value)
    # the process that failed to build the reward, its node, the reward, and the fix
    assert message.startswith("reward_client on ") and "(node id " in message
    assert "reward module 'driver_only_rewards' cannot be imported (reward term 'digit')" in message
    assert "PYTHONPATH" in message
    assert "rollouter" not in message and "learner" not in message
