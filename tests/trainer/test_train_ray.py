"""End-to-end runs on the session's local Ray with the tiny model: both modes, faults, resume."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import re
import shutil
import signal
import time
from pathlib import Path

import pytest

from rewardhub.errors import RewardhubDeprecationWarning
from rewardhub_trainer.cli import train

pytestmark = pytest.mark.ray


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def _check_accounting(summary: dict, samples_per_step: int) -> None:
    assert summary["samples_generated"] == (summary["samples_trained"] + summary["samples_dropped_stale"]
                                            + summary["samples_unused_at_end"])
    assert summary["accounting_exact"] is True
    assert summary["samples_trained"] == summary["steps"] * samples_per_step
    assert summary["max_staleness_seen"] <= summary["staleness_limit"]


def _check_fingerprints(summary: dict) -> None:
    roles = {w["role"] for w in summary["workers"]}
    assert {"learner", "rollouter", "reward_worker"} <= roles
    assert summary["driver_fingerprint"]
    for w in summary["workers"]:
        assert w["pid"] != summary["driver_pid"]
        if w["role"] in ("learner", "rollouter"):  # they never call a reward: no registry built
            assert w["registry_fingerprint"] is None, w
        else:
            assert w["registry_fingerprint"] == summary["driver_fingerprint"], w
    # provenance: each reward the config uses, and every reward worker that ran it
    scorers = sorted(w["pid"] for w in summary["workers"] if w["role"] == "reward_worker")
    assert summary["rewards"]
    for r in summary["rewards"]:
        assert r["identity"] and r["source"] in ("builtin", "config", "entry-point", "plugin")
        assert sorted(w["pid"] for w in r["workers"]) == scorers


@pytest.fixture(scope="module")
def _sync_run_once(ray_session, write_tiny, tmp_path_factory):
    """One sync run of 6 steps on the tiny config (what tiny_config writes with only the mode set),
    with what it said on stderr: trained once for the tests that only read a finished run."""
    tmp = tmp_path_factory.mktemp("sync-run")
    out = tmp / "sync"
    said = io.StringIO()
    with contextlib.redirect_stderr(said):
        summary = train(write_tiny(tmp, trainer={"mode": "sync", "total_steps": 6}), output=str(out))
    return summary, out, said.getvalue()


@pytest.fixture
def sync_run(_sync_run_once, tmp_path):
    """The shared sync run for one test: its summary (a copy), a copy of its output folder, its stderr.
    A test may change what it gets; the next test gets the run as it ended."""
    summary, out, said = _sync_run_once
    mine = tmp_path / "shared-sync"
    shutil.copytree(out, mine)
    return copy.deepcopy(summary), mine, said


def test_a_reward_model_scores_on_its_own_pool(ray_session, tiny_config, tmp_path):
    """verl's reward_model.enable: the classifier gets a Ray pool of its own next to the reward workers."""
    tiny = pytest.importorskip("rewardhub_models.tiny")
    rm_path = tiny.build_tiny_reward_model(tmp_path / "rm")
    out = tmp_path / "run"
    summary = train(tiny_config(trainer={"mode": "fully_async", "total_steps": 3},
                                reward={"reward_model": {"enable": True, "model_path": rm_path},
                                        "rewards": [{"name": "regex_match", "kwargs": {"pattern": "[0-9]"}},
                                                    {"name": "reward_model", "weight": 0.5}]}),
                    output=str(out))
    _check_accounting(summary, 8)
    _check_fingerprints(summary)
    pools = sorted(w.get("pool") for w in summary["workers"] if w["role"] == "reward_worker")
    assert pools == ["reward", "reward_model"]
    # the client split its pool in two from the one registry it built (not one per part)
    assert [w["registry_builds"] for w in summary["workers"] if w["role"] == "reward_client"] == [1]
    for r in _rows(out):
        assert r["rewards/reward_model/count"] == 8 and r["rewards/reward_model/errors"] == 0
        assert "rewards/regex_match/mean" in r


@pytest.mark.parametrize(("mode", "extra"), [
    ("sync", {}),
    ("fully_async", {"lend_idle_cores": "always"}),  # threads lent even to the tiny model
    # two batches scored at once, each by its own client and pool of two reward workers
    ("fully_async", {"score_concurrency": 2, "num_reward_workers": 2, "staleness_limit": 2, "queue_size": 3}),
], ids=["sync", "fully_async", "fully_async-score2"])
def test_both_modes_train_with_exact_accounting(ray_session, tiny_config, tmp_path, mode, extra, capsys,
                                                request):
    if mode == "sync" and not extra:  # the module's shared sync run is this very run
        summary, out, err = request.getfixturevalue("sync_run")
    else:
        out = tmp_path / mode
        summary = train(tiny_config(trainer={"mode": mode, "total_steps": 6, **extra}), output=str(out))
        err = capsys.readouterr().err
    assert summary["mode"] == mode and summary["steps"] == 6
    # the start says what it is doing (it took ~46 s in silence): Ray, the actors, the models
    said = [line for line in err.splitlines() if line.startswith("starting: ")]
    assert said[:2] == ["starting: in the Ray this process runs",
                        "starting: the actors: 1 learner(s), 1 rollouter(s), the reward workers"]
    assert said[2].startswith("starting: waiting for the reward workers") and len(said) == 5
    assert said[3].startswith("starting: waiting for the learner and the rollouters to load the model ")
    assert re.fullmatch(r"starting: the actors are up \(\d+\.\ds\)", said[4])
    _check_accounting(summary, 8)
    _check_fingerprints(summary)
    reward_workers = [w for w in summary["workers"] if w["role"] == "reward_worker"]
    assert len(reward_workers) == extra.get("score_concurrency", 1) * extra.get("num_reward_workers", 1)
    assert len({w["pid"] for w in reward_workers}) == len(reward_workers)
    rows = _rows(out)
    assert [r["step"] for r in rows] == list(range(1, 7))
    assert [r["batch_index"] for r in rows] == list(range(6))
    for r in rows:
        assert r["staleness"] <= summary["staleness_limit"]
        assert "rewards/regex_match/mean" in r and 0.0 <= r["reward/mean"] <= 1.0
        for key in ("loss/policy", "kl", "throughput/samples_per_s", "idle/rollouter", "idle/learner"):
            assert key in r
    if mode == "sync":
        assert summary["weight_syncs"] == 5 and all(r["staleness"] == 0 for r in rows)
    else:
        assert summary["weight_syncs"] == 5  # sync_interval 1, none after the last step
        assert any(r["staleness"] >= 1 for r in rows)  # generation really overlapped training
    base = max(1, (os.cpu_count() or 1) // 2)  # fully_async: the learner's and the rollouter's own threads
    if mode == "sync" or extra.get("lend_idle_cores", "never") == "never":  # the default: no board
        assert not any("threads/learner" in r or "threads/rollouter" in r for r in rows)
    else:
        # the last batch is generated before it is trained: its training borrows the waiting rollouter's
        # threads (all but the moments a weight sync loads on the rollouter); no actor ever has fewer
        assert rows[-1]["threads/learner"] > 1.5 * base
        assert all(r["threads/learner"] >= base and r["threads/rollouter"] >= base for r in rows)
    assert (out / "metrics.png").read_bytes()[:4] == b"\x89PNG"
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))
    assert (out / "checkpoints" / "step_000006" / "trainer_state.json").exists()
    assert json.loads((out / "summary.json").read_text()) == json.loads(json.dumps(summary))


def test_stale_samples_are_dropped_and_counted(ray_session, tiny_config, tmp_path):
    """Without the staleness gate and a sync every 3 steps, some batches arrive too old."""
    cfg = tiny_config(trainer={"mode": "fully_async", "total_steps": 8, "staleness_limit": 0,
                               "sync_interval": 3, "staleness_gate": False, "queue_size": 2})
    summary = train(cfg, output=str(tmp_path / "o"))
    assert summary["samples_dropped_stale"] > 0
    assert summary["samples_dropped_stale"] % 8 == 0  # whole batches
    _check_accounting(summary, 8)
    assert summary["max_staleness_seen"] == 0
    rows = _rows(tmp_path / "o")
    assert all(r["staleness"] == 0 for r in rows)
    assert rows[-1]["samples/dropped_stale"] == summary["samples_dropped_stale"]
    # every drop comes before a trained step, and each row says how many batches in a row it followed
    assert sum(r["stale/batches_in_a_row"] for r in rows) * 8 == summary["samples_dropped_stale"]
    assert summary["max_stale_batches_in_a_row"] == max(r["stale/batches_in_a_row"] for r in rows)


def _killer(role: str, at_step: int, killed: list):
    def on_step(step, metrics, run):
        if step != at_step:
            return
        pid = next(w["pid"] for w in run.fleet.workers if w["role"] == role)
        os.kill(pid, signal.SIGKILL)
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        killed.append(pid)

    return on_step


@pytest.mark.parametrize(("role", "mode"), [("reward_worker", "fully_async"), ("rollouter", "fully_async"),
                                            ("rollouter", "sync")])
def test_killed_worker_is_replaced_and_nothing_is_lost(ray_session, tiny_config, tmp_path, role, mode):
    killed: list[int] = []
    cfg = tiny_config(trainer={"mode": mode, "total_steps": 6})
    summary = train(cfg, output=str(tmp_path / "o"), callbacks=[_killer(role, 2, killed)])
    assert len(killed) == 1
    assert summary["steps"] == 6
    _check_accounting(summary, 8)
    _check_fingerprints(summary)
    assert summary["restarts"][role] >= 1
    if role == "rollouter":
        assert summary["lost_calls"]["rollouter"] >= 1  # the driver resubmitted the lost batch
    else:
        assert summary["rescored_samples"] >= 1  # the pool re-scored the dead worker's chunk, once
    now = [w["pid"] for w in summary["workers"] if w["role"] == role]
    assert killed[0] not in now  # a new process serves the role
    rows = _rows(tmp_path / "o")
    assert [r["batch_index"] for r in rows] == list(range(6))  # no batch skipped or repeated
    if role == "reward_worker":
        assert killed[0] in summary["reward_pids"] and set(now) & set(summary["reward_pids"])


def test_resume_continues_step_count_and_data_order(ray_session, tiny_config, tmp_path, sync_run):
    # dtypes as `auto` chooses them (bf16 where the CPU has it natively): the weights are compared bit
    # for bit with an uninterrupted run, so the three runs must also choose alike
    first = tmp_path / "first"
    s1 = train(tiny_config(trainer={"mode": "sync", "total_steps": 3}), output=str(first))
    assert s1["steps"] == 3
    resumed = tmp_path / "resumed"
    s2 = train(
        tiny_config(trainer={"mode": "sync", "total_steps": 6}), output=str(resumed), resume=str(first)
    )
    assert s2["resumed_from_step"] == 3 and s2["steps"] == 6
    assert s2["samples_trained_this_run"] == 3 * 8
    _check_accounting(s2, 8)
    s3, whole, _ = sync_run  # the uninterrupted run: the same config, trained once for the module

    def dtypes(summary: dict) -> dict:
        return {role: (d["device"], d["autocast"], d["model_dtype"], d["rollout_dtype"])
                for role, d in summary["devices"].items()}

    assert dtypes(s1) == dtypes(s2) == dtypes(s3)
    got, want = _rows(resumed), _rows(whole)
    assert [r["step"] for r in got] == list(range(1, 7))
    assert [(r["batch_index"], r["dataset_indices"]) for r in got] == \
        [(r["batch_index"], r["dataset_indices"]) for r in want]
    assert [r["policy_version"] for r in got] == list(range(6))
    # the policy continued from the checkpoint's weights (and optimizer state): the resumed run ends
    # with the uninterrupted run's weights, and its batches after the checkpoint got the same rewards
    import torch
    from safetensors.torch import load_file

    def weights(run: Path, step: int) -> dict:
        return load_file(run / "checkpoints" / f"step_{step:06d}" / "model.safetensors")

    end_resumed, end_whole, at_3 = weights(resumed, 6), weights(whole, 6), weights(first, 3)
    assert end_resumed.keys() == end_whole.keys() == at_3.keys()
    diff = max((end_resumed[k].float() - end_whole[k].float()).abs().max().item() for k in end_whole)
    assert diff <= 1e-6, f"resumed vs uninterrupted weights differ by up to {diff:g}"
    assert any(not torch.allclose(at_3[k], end_whole[k], rtol=0, atol=1e-6) for k in end_whole)
    assert [r["reward/mean"] for r in got[3:]] == [r["reward/mean"] for r in want[3:]]
    assert [r["loss/policy"] for r in got[3:]] == pytest.approx(
        [r["loss/policy"] for r in want[3:]], abs=1e-5
    )


def test_legacy_custom_reward_runs_on_workers(ray_session, tiny_config, tmp_path):
    log = tmp_path / "pids.log"
    reward_file = tmp_path / "my_reward.py"
    reward_file.write_text(
        "import os\n"
        f"LOG = {str(log)!r}\n"
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n"
        "    with open(LOG, 'a') as f:\n"
        "        f.write(f'{os.getpid()} {os.getppid()}\\n')\n"
        "    return float(any(ch.isdigit() for ch in solution_str))\n"
    )
    cfg = tiny_config(trainer={"mode": "fully_async", "total_steps": 4}, reward=None)
    with pytest.warns(RewardhubDeprecationWarning, match="custom_reward_function.path"):
        summary = train(cfg, [f"custom_reward_function.path={reward_file}"], output=str(tmp_path / "o"))
    assert summary["mode"] == "fully_async"
    _check_accounting(summary, 8)
    _check_fingerprints(summary)
    calls = [tuple(map(int, line.split())) for line in log.read_text().splitlines()]
    workers = {w["pid"] for w in summary["workers"] if w["role"] == "reward_worker"} | set(
        summary["reward_pids"]
    )
    assert calls and summary["driver_pid"] not in {p for call in calls for p in call}
    # on a reward worker: in it, or (a sync reward gets trainer.reward_timeout_s in training, so it runs
    # on the process executor, where a hung call can be killed) in a process it forked
    assert all(pid in workers or parent in workers for pid, parent in calls)
    assert len(calls) >= summary["samples_trained"]
    rows = _rows(tmp_path / "o")
    assert any(k.startswith("rewards/") for k in rows[0])


@pytest.mark.parametrize(("workers", "resources", "cpus"), [
    ({"num_cpus": 2}, None, 2.0),  # reward.workers.num_cpus, as the rewardhub score CLI reads it
    ({"num_cpus": 2}, {"reward_worker": {"num_cpus": 1.5}}, 1.5),  # resources.reward_worker wins
], ids=["reward.workers", "resources.reward_worker"])
def test_reward_workers_hold_the_cpus_the_config_declares(ray_session, tiny_config, tmp_path, workers,
                                                          resources, cpus):
    """What Ray assigned to each reward worker, asked inside the worker (not the config read back)."""
    import ray

    # runs in the reward client (a nested function travels by value)
    def held_by_workers(client) -> list[dict]:
        import ray

        def held(worker) -> dict:  # runs in a reward worker
            import ray

            return dict(ray.get_runtime_context().get_assigned_resources())

        return ray.get([s.actor.__ray_call__.remote(held) for g in client.pool.groups for s in g._slots])

    seen: list[list[dict]] = []

    def ask(step, metrics, run):
        clients = run.fleet.reward_client.handles
        seen.extend(ray.get([h.__ray_call__.remote(held_by_workers) for h in clients]))

    sections = {"trainer": {"mode": "sync", "total_steps": 1},
                "reward": {"workers": {"num_workers": 1, **workers}}}
    if resources:
        sections["resources"] = resources
    summary = train(tiny_config(**sections), output=str(tmp_path / "o"), callbacks=[ask])
    assert summary["steps"] == 1
    assert seen == [[{"CPU": cpus}]]
