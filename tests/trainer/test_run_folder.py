"""The run folder: one run per ``--output``, nothing of an earlier run deleted before a new one has
started, bad places refused before Ray starts, no resolved secret in any output, SIGTERM -> 143.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rewardhub.errors import UsageError
from rewardhub_trainer.cli import train
from rewardhub_trainer.faults import RunAborted

SECRET = "rf-secret-7f3a9c"


def _files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rewardhub", "train", *args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.timeout(180)
def test_output_naming_a_file_an_unwritable_place_or_proc_is_one_error(model_cache, tiny_config, tmp_path):
    cfg = tiny_config()
    a_file = tmp_path / "taken.txt"
    a_file.write_text("not a folder")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    cases = [(str(a_file), "is a file, not a folder"), (str(a_file / "sub"), "cannot write there"),
             ("/proc/self/run", "not a place for a run folder")]
    if os.geteuid() != 0:  # root writes anywhere
        cases.append((str(locked / "run"), "cannot write there (Permission denied)"))
    for output, error in cases:
        with pytest.raises(UsageError, match=r"^--output .*" + error.replace("(", r"\(").replace(")", r"\)")):
            train(cfg, output=output)
    assert a_file.read_text() == "not a folder"
    res = _cli(cfg, "--output", str(a_file))  # the command: one ERROR line, exit 2, no traceback
    assert res.returncode == 2, res.stderr
    assert res.stderr.splitlines()[0] == f"ERROR: --output {a_file}: is a file, not a folder"
    assert "Traceback" not in res.stderr and "ray" not in res.stderr.lower()


@pytest.mark.ray
@pytest.mark.timeout(420)
def test_a_run_folder_belongs_to_one_run_and_holds_no_secret(ray_session, tiny_config, tmp_path, monkeypatch):
    monkeypatch.setenv("RF_TEST_SECRET", f"[0-9]|{SECRET}")
    reward = {"rewards": [{"name": "regex_match", "kwargs": {"pattern": "${oc.env:RF_TEST_SECRET}"}}]}
    cfg = tiny_config(trainer={"total_steps": 2}, reward=reward)
    out = tmp_path / "o"
    summary = train(cfg, output=str(out))
    assert summary["steps"] == 2
    before = _files(out)
    assert "checkpoints/step_000002/trainer_state.json" in before and "run.json" in before
    for name, data in before.items():  # checkpoints, summary, metrics, TensorBoard, run.json
        assert SECRET.encode() not in data, name
    state = json.loads(before["checkpoints/step_000002/trainer_state.json"])
    assert state["config"]["reward"]["rewards"][0]["kwargs"]["pattern"] == "${oc.env:RF_TEST_SECRET}"

    # the same folder again: refused, whatever the config, and nothing of the run is touched
    with pytest.raises(UsageError, match=r"^--output .*: holds another run .*\n.*--resume .* or --overwrite"):
        train(cfg, output=str(out))
    other = tiny_config(
        trainer={"total_steps": 3},
        model={
            "tiny": {
                "arch": "qwen2",
                "hidden_size": 32,
                "num_hidden_layers": 1,
                "num_attention_heads": 1,
                "num_key_value_heads": 1,
            }
        },
    )
    with pytest.raises(
        UsageError, match=r"^--resume .*: the run in that folder has another config \(model, reward differ\)"
    ):
        train(other, output=str(out), resume=str(out))
    # resumed into another folder: the same check, before anything starts
    elsewhere = tmp_path / "elsewhere"
    with pytest.raises(
        UsageError, match=r"^--resume .*: the run in that folder has another config \(model, reward differ\)"
    ):
        train(other, output=str(elsewhere), resume=str(out))
    assert _files(out) == before and not elsewhere.exists()  # refused: no empty folder left behind

    # --overwrite: the earlier run's files go only once the new run has started (here: one whose
    # reward always fails, which stops it after 3 steps)
    failing = tmp_path / "fails.py"
    failing.write_text("def nope(**kwargs):\n    raise ValueError('nope')\n")
    bad = tiny_config(
        trainer={"total_steps": 6}, reward={"rewards": [{"path": str(failing), "function": "nope"}]}
    )
    with pytest.raises(RunAborted, match="reward 'nope'"):
        train(bad, output=str(out), overwrite=True)
    after = _files(out)
    assert not any(n.startswith("checkpoints/") for n in after) and "summary.json" not in after
    assert [json.loads(x)["step"] for x in after["metrics.jsonl"].decode().splitlines()] == [1, 2, 3]
    assert json.loads(after["run.json"])["fingerprint"] != json.loads(before["run.json"])["fingerprint"]


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_sigterm_stops_a_run_with_one_error_line_and_143(model_cache, tiny_config, tmp_path):
    cfg = tiny_config(trainer={"total_steps": 500})
    out = tmp_path / "o"
    proc = subprocess.Popen(
        [sys.executable, "-m", "rewardhub", "train", cfg, "--output", str(out), "--no-progress"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 240
        while not (out / "metrics.jsonl").exists() or not (out / "metrics.jsonl").read_text().strip():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err
    assert err.strip().splitlines()[-1] == "ERROR: terminated", err
    assert err.count("ERROR") == 1 and "Traceback" not in err, err


@pytest.mark.timeout(180)
def test_resume_into_another_output_needs_the_config_of_the_run_it_resumes(model_cache, tiny_config,
                                                                           tmp_path):
    """``--resume OLD --output NEW`` goes on from OLD's data cursor and weights: another data or reward
    section would train another run's batches on them silently (the check ran only when NEW was OLD)."""
    from rewardhub.config import load_plan
    from rewardhub_trainer.checkpoint import commit_checkpoint
    from rewardhub_trainer.checkpoint import staging_path
    from rewardhub_trainer.checkpoint import write_state
    from rewardhub_trainer.prepare import prepare
    from rewardhub_trainer.runfolder import begin
    from rewardhub_trainer.runfolder import check_resume_model
    from rewardhub_trainer.runfolder import claim

    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir()
    prep = prepare(load_plan(tiny_config(), ()))
    first = prep.public_config()
    begin(old, first, overwrite=False, resumed_here=False)  # its run.json, as a run writes it
    staged = staging_path(old / "checkpoints", 2)  # and a checkpoint at step 2 (the driver's state)
    staged.mkdir()
    write_state(staged, {"step": 2, "data_cursor": 2, "counts": {}, "config": first})
    commit_checkpoint(staged, 2, keep=1)
    other_reward = {"rewards": [{"name": "regex_match", "kwargs": {"pattern": "[a-z]"}}]}
    changes = (({"data": {"seed": 1}}, "data differs"), ({"reward": other_reward}, "reward differs"))
    for section, differ in changes:
        refused = (rf"^--resume {old}: the run in that folder has another config \({differ}\)\n"
                   r".*without --resume")
        config = prepare(load_plan(tiny_config(**section), ())).public_config()
        with pytest.raises(UsageError, match=refused):
            claim(new, config, resume=str(old), overwrite=False)
        (old / "run.json").rename(old / "run.json.away")  # from its checkpoint alone, too
        with pytest.raises(UsageError, match=refused):
            claim(new, config, resume=str(old), overwrite=False)
        (old / "run.json.away").rename(old / "run.json")
        with pytest.raises(UsageError, match=refused):  # the command: before Ray starts
            train(tiny_config(**section), output=str(new), resume=str(old))
    assert not new.exists()  # refused: no empty folder left behind
    # the same model, data and reward (more steps, other trainer settings): accepted
    claim(new, prepare(load_plan(tiny_config(trainer={"total_steps": 9, "lr": 1e-3}), ())).public_config(),
          resume=str(old), overwrite=False)
    # a model of another shape than its checkpoint's is named as such
    (old / "ckpt").mkdir()
    config = json.loads((Path(prep.model_path) / "config.json").read_text())
    (old / "ckpt" / "config.json").write_text(json.dumps({**config, "hidden_size": 32}))
    with pytest.raises(UsageError, match=r"^--resume old: its checkpoint ckpt holds a model of another shape "
                                         r"\(hidden_size 32 -> 64\)"):
        check_resume_model(old / "ckpt", prep.model_path, "old")


@pytest.mark.ray
@pytest.mark.timeout(300)
@pytest.mark.parametrize(("signum", "code", "line"), [(signal.SIGTERM, 143, "ERROR: terminated"),
                                                      (signal.SIGINT, 130, "ERROR: interrupted")])
def test_a_signal_while_the_driver_waits_in_ray_get_ends_the_run_at_once(model_cache, tiny_config, tmp_path,
                                                                         signum, code, line):
    """The driver spends nearly all of a run blocked in ``ray.get``/``ray.wait``, where Ray turns the
    exception of a signal's handler into a plain ``KeyboardInterrupt``: SIGTERM there exited 1 with
    ``ERROR: interrupted``. Here it lands while the driver waits for a reward that is still running
    (the reward says so by writing a file). Ctrl-C (SIGINT) there ends the run as promptly, 128 + 2."""
    started = tmp_path / "scoring"
    reward = tmp_path / "slow_reward.py"
    reward.write_text(
        "import pathlib, time\n"
        "def slow(data_source, solution_str, ground_truth, extra_info=None, **kw):\n"
        f"    pathlib.Path({str(started)!r}).touch()\n"
        "    time.sleep(240)\n"
        "    return 0.0\n")
    cfg = tiny_config(trainer={"total_steps": 3, "reward_timeout_s": 600},
                      reward={"rewards": [{"path": str(reward), "function": "slow"}]})
    proc = subprocess.Popen(
        [sys.executable, "-m", "rewardhub", "train", cfg, "--output", str(tmp_path / "o"), "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while not started.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.2)
        time.sleep(1.0)  # the driver is in ray.get until the reward returns (in 240 s)
        proc.send_signal(signum)
        t0 = time.monotonic()
        _, err = proc.communicate(timeout=150)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, err
    assert err.strip().splitlines()[-1] == line, err
    assert err.count("ERROR") == 1 and "Traceback" not in err, err
    # the reward returns only in 240 s; the busy reward client's close was waited for 60 s (64 s in all)
    assert took < 45, f"{signum.name} took {took:.1f}s to end the run"
    print(f"{signum.name} in ray.get: exit {proc.returncode} after {took:.1f}s")


@pytest.mark.timeout(180)
def test_resume_after_the_reward_files_code_changed_is_refused_unless_allowed(model_cache, tiny_config,
                                                                             tmp_path, capsys):
    """The config names the same file, whose code changed since the checkpoint: resumed silently with
    another reward. Each checkpoint records its rewards' identities (a file's sha256, a plugin's
    ``dist==version``), and ``--resume`` compares them, before Ray starts."""
    from rewardhub.config import load_plan
    from rewardhub_trainer.checkpoint import commit_checkpoint
    from rewardhub_trainer.checkpoint import staging_path
    from rewardhub_trainer.checkpoint import write_state
    from rewardhub_trainer.prepare import prepare
    from rewardhub_trainer.runfolder import check_resume_rewards

    reward = tmp_path / "digits.py"
    reward.write_text("def digits(data_source, solution_str, ground_truth, extra_info=None, **kw):\n"
                      "    return float(any(c.isdigit() for c in solution_str))\n")
    cfg = tiny_config(reward={"rewards": [{"path": str(reward), "function": "digits"}]})
    prep = prepare(load_plan(cfg, ()))
    before = prep.reward_identities()
    [(name, identity)] = before.items()
    assert identity.startswith("sha256:")
    old = tmp_path / "old"
    staged = staging_path(old / "checkpoints", 2)  # a checkpoint as a run writes its driver state
    staged.mkdir(parents=True)
    write_state(staged, {"step": 2, "data_cursor": 2, "counts": {}, "config": prep.public_config(),
                         "rewards": before})
    ckpt = commit_checkpoint(staged, 2, keep=1)
    check_resume_rewards(ckpt, before, str(old), allow=False)  # unchanged: resumed

    reward.write_text(reward.read_text().replace("any(", "all("))  # the same file, other code
    after = prepare(load_plan(cfg, ())).reward_identities()
    assert after[name] != identity
    refused = (rf"^--resume {old}: reward code changed since its checkpoint step_000002: '{name}' "
               rf"{identity} -> {after[name]}\nrestore the reward as it was, or pass --allow-reward-change")
    with pytest.raises(UsageError, match=refused):
        check_resume_rewards(ckpt, after, str(old), allow=False)
    with pytest.raises(UsageError, match=refused):  # the command, before Ray starts
        train(cfg, output=str(tmp_path / "new"), resume=str(old))
    res = _cli(cfg, "--output", str(tmp_path / "new"), "--resume", str(old))
    assert res.returncode == 2, res.stderr
    assert f"ERROR: --resume {old}: reward code changed" in res.stderr, res.stderr
    assert res.stderr.count("ERROR") == 1 and "Traceback" not in res.stderr
    check_resume_rewards(ckpt, after, str(old), allow=True)  # --allow-reward-change: a warning, and on
    assert f"WARNING: --resume {old}: reward code changed since its checkpoint" in capsys.readouterr().err


@pytest.mark.timeout(180)
def test_a_second_run_into_a_folder_whose_run_is_still_starting_is_refused(model_cache, tiny_config,
                                                                           tmp_path):
    """The folder check read what a run had written, and a run writes nothing until its actors are up:
    a second run into the same --output passed it while the first was starting. The first now holds
    the folder's lock from the moment it chose it (another process, or this one)."""
    from rewardhub.config import load_plan
    from rewardhub_trainer.loop import Run
    from rewardhub_trainer.prepare import prepare
    from rewardhub_trainer.runfolder import holds_run

    cfg = tiny_config()
    prep = prepare(load_plan(cfg, ()))
    out = tmp_path / "o"
    first = Run(prep, str(out))  # chosen and checked; nothing started, nothing written yet
    assert not holds_run(out)
    holder = f"another run is writing there (pid {os.getpid()} on "
    refused = rf"^--output {out}: {re.escape(holder)}.*\)\nwait for it to end"
    with pytest.raises(UsageError, match=refused):
        Run(prep, str(out))
    res = _cli(cfg, "--output", str(out))  # from another process
    assert res.returncode == 2, res.stderr
    assert f"ERROR: --output {out}: {holder}" in res.stderr, res.stderr
    assert res.stderr.count("ERROR") == 1 and "Traceback" not in res.stderr
    first.lock.release()  # the first run ended (however it ended: the kernel lets the lock go)
    Run(prep, str(out)).lock.release()
    assert not any(out.iterdir())  # nothing left behind by the lock


@pytest.mark.timeout(240)
def test_ray_address_where_ray_is_not_fails_fast_with_one_error(model_cache, tiny_config, tmp_path):
    """RAY_ADDRESS naming a port where nothing listens, or where another service listens: Ray retried
    for minutes, a line every few seconds. Now: one ERROR line, exit 1, within the connect bound."""
    import socket

    from rewardhub_trainer.cli import RAY_CONNECT_S

    cfg = tiny_config()
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        closed_port = free.getsockname()[1]
    silent = socket.socket()  # accepts connections (the kernel's backlog), answers nothing
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    silent_port = silent.getsockname()[1]
    refused = (f"ERROR: no Ray cluster at RAY_ADDRESS 127.0.0.1:{closed_port}: nothing listens on port "
               f"{closed_port} of 127.0.0.1 (connection refused)")
    gave_up = f"ERROR: Ray did not connect to 127.0.0.1:{silent_port} within {RAY_CONNECT_S:g} s"
    # bounds: Python's start and the imports on a loaded machine, plus the connect bound
    cases = [(closed_port, refused, 90), (silent_port, gave_up, RAY_CONNECT_S + 90)]
    try:
        for port, line, bound in cases:
            env = dict(os.environ, RAY_ADDRESS=f"127.0.0.1:{port}")
            t0 = time.monotonic()
            args = ["train", cfg, "--output", str(tmp_path / f"o{port}"), "--no-progress"]
            res = subprocess.run([sys.executable, "-m", "rewardhub", *args], capture_output=True, text=True,
                                 timeout=bound + 60, env=env)
            took = time.monotonic() - t0
            assert res.returncode == 1, res.stderr
            assert line in res.stderr, res.stderr
            assert res.stderr.count("ERROR") == 1 and "Traceback" not in res.stderr, res.stderr
            assert took < bound, (took, res.stderr)
            print(f"RAY_ADDRESS 127.0.0.1:{port}: exit 1 after {took:.1f}s")
    finally:
        silent.close()


def test_every_value_from_the_environment_is_written_unresolved(monkeypatch):
    from omegaconf import OmegaConf

    from rewardhub_trainer.runfolder import env_paths
    from rewardhub_trainer.runfolder import public_config

    monkeypatch.setenv("RF_KEY", SECRET)
    raw = OmegaConf.create({"reward": {"rewards": [{"name": "judge", "kwargs": {
        "headers": ["x", "Bearer ${oc.env:RF_KEY}"], "url": "${oc.env:RF_URL,http://localhost}"}}]},
        "trainer": {"lr": 0.1, "lr2": "${trainer.lr}"}})
    resolved = OmegaConf.to_container(raw, resolve=True)
    assert SECRET in json.dumps(resolved)
    public = public_config(resolved, env_paths(raw))
    assert SECRET not in json.dumps(public)
    kwargs = public["reward"]["rewards"][0]["kwargs"]
    assert kwargs == {"headers": ["x", "Bearer ${oc.env:RF_KEY}"], "url": "${oc.env:RF_URL,http://localhost}"}
    assert public["trainer"] == {"lr": 0.1, "lr2": 0.1}  # other interpolations stay resolved


@pytest.mark.timeout(180)
def test_a_second_run_into_a_folder_a_starting_run_holds_is_refused_before_ray(model_cache, tiny_config,
                                                                               tmp_path):
    """Issue 43 §3: the second run was refused only once it had built its model, read its data and
    imported Ray (the folder was locked by the run's orchestration, which imports Ray). It is refused as
    soon as it has read its config now: neither Ray nor torch imported."""
    from rewardhub_trainer.runfolder import RunFolder

    out = tmp_path / "o"
    first = RunFolder(str(out))  # a run that is starting: the folder chosen and held
    probe = ("import json, sys\nfrom rewardhub.cli import main\nrc = main(['train', *sys.argv[1:]])\n"
             "print(json.dumps({'rc': rc, 'ray': 'ray' in sys.modules, 'torch': 'torch' in sys.modules}))\n")
    try:
        args = [tiny_config(), "--output", str(out), "--no-progress"]
        res = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True,
                             timeout=150)
    finally:
        first.release()
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert got == {"rc": 2, "ray": False, "torch": False}, res.stderr
    assert f"ERROR: --output {out}: another run is writing there (pid {os.getpid()}" in res.stderr
    assert res.stderr.count("ERROR") == 1 and "Traceback" not in res.stderr
    assert out.is_dir()  # the first run's folder: kept
