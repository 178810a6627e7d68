"""Reward-worker logic without Ray: fingerprint diffs, file shipping, start-up problems, explanations."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import textwrap

import pytest

import rewardhub
from rewardhub._targets import file_module_name
from rewardhub.distributed import DriverOnlyRewardError
from rewardhub.distributed import RegistryMismatchError
from rewardhub.distributed import RewardWorker
from rewardhub.distributed import ShippedFile
from rewardhub.distributed import diff_items
from rewardhub.distributed import prepare_setup
from rewardhub.distributed._chunks import make_chunks
from rewardhub.distributed._files import place_files

REWARD_FILE = '''
import os
def length(*, response, **kwargs):
    """Length of the response."""
    return {"score": float(len(response)), "pid": os.getpid()}
'''


def test_diff_kinds_and_which_are_fatal():
    driver = {"a": "pkg==1.0", "b": "sha256:aa", "c": "x==1", "d": "q==1", "used_broken": "m==1"}
    worker = {"a": "pkg==2.0", "b": "sha256:bb", "d": "q==1", "e": "new==1", "used_broken": "m==1 (broken)"}
    diffs = {d["reward"]: d for d in diff_items(driver, worker, ["a", "b", "used_broken"])}
    assert sorted(diffs) == ["a", "b", "c", "e", "used_broken"]
    assert diffs["a"] == {
        "reward": "a",
        "kind": "version",
        "driver": "pkg==1.0",
        "worker": "pkg==2.0",
        "fatal": True,
    }
    assert diffs["b"]["kind"] == "file_hash" and diffs["b"]["fatal"]
    assert diffs["c"]["kind"] == "missing" and not diffs["c"]["fatal"]  # the config does not use it
    assert diffs["e"]["kind"] == "extra" and not diffs["e"]["fatal"]
    assert diffs["used_broken"]["kind"] == "broken"
    strict = {d["reward"]: d["fatal"] for d in diff_items(driver, worker, ["a"], strict=True)}
    assert strict == {"a": True, "b": True, "c": True, "e": False, "used_broken": True}
    # nothing named (doctor without a config): every difference is a warning, unless strict
    assert len(diff_items(driver, worker, [])) == 5 and not any(
        d["fatal"] for d in diff_items(driver, worker, [])
    )
    assert all(d["fatal"] for d in diff_items(driver, worker, [], strict=True) if d["kind"] != "extra")
    assert diff_items(driver, dict(driver), ["a"]) == []


def test_mismatch_error_names_reward_node_pool_and_difference():
    worker = {"pool": "rm", "index": 1, "ip": "10.0.0.7", "node_id": "f00dcafe" * 7,
              "problems": [{"reward": "math_verify", "kind": "version", "driver": "rewardhub-math==0.1.0",
                            "worker": "rewardhub-math==0.2.0"}]}
    err = RegistryMismatchError("rm", "abc123", [worker])
    text = str(err)
    for part in ("reward 'math_verify' has a different version: driver rewardhub-math==0.1.0, worker "
                 "rewardhub-math==0.2.0", "node 10.0.0.7, node id f00dcafef00d, worker 1 of pool 'rm'",
                 "install the same distributions"):
        assert part in text
    assert "\n" not in text  # the CLI prints it as one `ERROR: ...` line
    assert err.rewards == ["math_verify"] and err.problems[0]["node_id"] == "f00dcafe" * 7
    assert err.driver_fingerprint == "abc123"
    # workers of one node that differ alike are named together; another node gets its own phrase
    other = {**worker, "index": 0, "ip": "10.0.0.8", "node_id": "beef" * 14}
    text = str(RegistryMismatchError("rm", "abc123", [worker, {**worker, "index": 2}, other]))
    assert "workers 1, 2 of pool 'rm'" in text and "node 10.0.0.8, node id beefbeefbeef, worker 0" in text
    assert text.count("has a different version") == 2 and "\n" not in text
    assert isinstance(err, rewardhub.RewardhubError)


@pytest.fixture
def reward_file(tmp_path):
    path = tmp_path / "driver_only" / "lengths.py"
    path.parent.mkdir()
    path.write_text(REWARD_FILE)
    return path


def test_shipped_file_keeps_its_module_name(reward_file, tmp_path, monkeypatch):
    monkeypatch.setenv("REWARDHUB_WORKER_FILES", str(tmp_path / "node"))
    setup, _ = prepare_setup({"rewards": [{"path": str(reward_file), "function": "length"}]})
    (shipped,) = setup.files
    assert (
        shipped.data == reward_file.read_bytes()
        and shipped.sha256 == hashlib.sha256(shipped.data).hexdigest()
    )
    cfg, problems, info = place_files(setup.files, setup.reward_cfg)
    local = cfg.rewards[0].path
    assert (
        problems == [] and local.startswith(str(tmp_path / "node")) and info["length"] == f"shipped {local}"
    )
    assert file_module_name(local) == file_module_name(str(reward_file))


def test_file_problems_are_named(reward_file, tmp_path, monkeypatch):
    monkeypatch.setenv("REWARDHUB_WORKER_FILES", str(tmp_path / "node"))
    setup, _ = prepare_setup({"rewards": [{"path": str(reward_file), "function": "length"}]})
    f = setup.files[0]
    corrupt = ShippedFile(f.reward, f.path, f.sha256, f.data + b"#")
    _, problems, _ = place_files([corrupt], setup.reward_cfg)
    assert problems[0]["kind"] == "file_hash" and "corrupted" in problems[0]["detail"]
    not_shipped = ShippedFile(f.reward, f.path, f.sha256, None)
    reward_file.write_text(REWARD_FILE + "\n# edited on this node\n")
    cfg, problems, _ = place_files([not_shipped], setup.reward_cfg)
    assert problems[0]["kind"] == "file_hash" and problems[0]["reward"] == "length" and cfg.rewards == ()
    reward_file.unlink()
    _, problems, _ = place_files([not_shipped], setup.reward_cfg)
    assert problems[0]["kind"] == "file_missing" and problems[0]["detail"] == str(reward_file)


def test_worker_reports_a_version_difference(reward_file):
    setup, _ = prepare_setup({"rewards": [{"name": "math_verify"}]})
    items = dict(setup.driver_items, math_verify="rewardhub-math==9.9")
    worker = RewardWorker(setup.__class__(**{**setup.__dict__, "driver_items": items}))
    hello = worker.hello()
    assert not hello["ok"] and hello["terms"] == []  # nothing is loaded after a mismatch
    (p,) = hello["problems"]
    assert (p["reward"], p["kind"], p["driver"], p["worker"]) == (
        "math_verify",
        "version",
        "rewardhub-math==9.9",
        "rewardhub-math==0.1.0",
    )
    with pytest.raises(RegistryMismatchError, match="math_verify"):
        worker.score([{"response": "1"}])


def test_worker_reports_a_target_difference_under_the_same_version(reward_file):
    """Same distribution and version, another module:attr (an edited editable install): named too."""
    setup, _ = prepare_setup(
        {"rewards": [{"name": "math_verify"}, {"path": str(reward_file), "function": "length"}]}
    )
    assert setup.driver_targets == {"math_verify": "rewardhub_math.reward:math_verify"}  # a file: its sha256
    targets = {"math_verify": "rewardhub_math.old_reward:math_verify"}
    hello = RewardWorker(setup.__class__(**{**setup.__dict__, "driver_targets": targets}), load=False).hello()
    (p,) = hello["problems"]
    assert (p["reward"], p["kind"], p["driver"], p["worker"]) == (
        "math_verify", "target", "rewardhub_math.old_reward:math_verify", "rewardhub_math.reward:math_verify")
    text = str(RegistryMismatchError("reward", setup.driver_fingerprint, [hello]))
    assert ("reward 'math_verify' has a different target: driver rewardhub_math.old_reward:math_verify, "
            "worker rewardhub_math.reward:math_verify") in text
    assert RewardWorker(setup, load=False).hello()["ok"]
    # the worker's own values of each used reward (its provenance)
    facts = RewardWorker(setup, load=False).hello()["rewards"]
    assert list(facts) == ["math_verify", "length"]
    assert facts["math_verify"] == {
        "source": "entry-point",
        "dist": "rewardhub-math",
        "version": rewardhub_math_version(),
        "target": "rewardhub_math.reward:math_verify",
        "sha256": None,
        "identity": f"rewardhub-math=={rewardhub_math_version()}",
    }
    assert facts["length"]["sha256"] == hashlib.sha256(reward_file.read_bytes()).hexdigest()
    assert facts["length"]["identity"] == f"sha256:{facts['length']['sha256']}"


def rewardhub_math_version() -> str:
    from importlib.metadata import version

    return version("rewardhub-math")


def test_worker_scores_in_process(reward_file, tmp_path, monkeypatch):
    monkeypatch.setenv("REWARDHUB_WORKER_FILES", str(tmp_path / "node"))
    setup, _ = prepare_setup(
        {"rewards": [{"path": str(reward_file), "function": "length", "on_failure": "raise"}]}
    )
    worker = RewardWorker(setup)
    assert worker.hello()["ok"], worker.hello()["problems"]
    assert worker.hello()["terms"][0]["on_failure"] == "raise"  # the driver applies it
    out = worker.score([{"response": "abc"}, {"response": "hello"}], indices=[10, 11])
    assert [o[0] for o in out["outcomes"]["length"]] == [3.0, 5.0]
    worker.close()


@rewardhub.reward(name="only_decorated_here")
def only_decorated_here(*, response, **kwargs):
    return 1.0


def test_decorator_without_a_source_is_explained():
    with pytest.raises(DriverOnlyRewardError, match=r"(?s)'only_decorated_here'.*no source registers it.*"
                                                    r"module: .*test_fingerprint"):
        prepare_setup({"rewards": [{"name": "only_decorated_here"}]})


def test_decorator_in_main_script_is_explained(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import sys
        import rewardhub
        from rewardhub.distributed import RewardWorkerPool

        @rewardhub.reward(name="script_reward")
        def script_reward(*, response, **kwargs):
            return 1.0

        try:
            RewardWorkerPool({"rewards": [{"name": "script_reward"}]}, num_workers=1)
        except rewardhub.UsageError as exc:
            print(exc)
        print("ray imported:", "ray" in sys.modules)
    """))
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert "'script_reward' is registered only by @reward in the driver's own script" in out
    assert str(script) in out and "put it in a module or file the config names" in out
    assert "ray imported: False" in out  # found before anything starts


def test_chunks_keep_groups_whole():
    batch = [{"prompt": p, "response": "x"} for p in "aabbbcd"]
    assert make_chunks(batch, 2, groups=True) == [[0, 1], [2, 3, 4], [5, 6]]
    assert make_chunks(batch, 3, groups=False) == [[0, 1, 2], [3, 4, 5], [6]]


def test_ray_terms_ship_as_typed_config_terms(reward_file):
    import pickle

    from rewardhub.config import TermConfig
    from rewardhub.distributed import runner_from_config
    from rewardhub.distributed._executor import RayExecutor
    from rewardhub.execution import Runner
    from rewardhub.registry import build_registry

    cfg = {"rewards": [{"name": "math_verify", "alias": "mv", "weight": 2.0, "executor": "ray"},
                       {"path": str(reward_file), "function": "length", "executor": "ray", "timeout_s": 5}]}
    with runner_from_config(cfg) as runner:
        shipped = pickle.loads(pickle.dumps(RayExecutor(runner.terms).reward_cfg))
    terms = shipped.rewards
    assert all(type(t) is TermConfig for t in terms)
    assert terms[0].name == "math_verify" and terms[0].alias == "mv" and terms[0].weight == 2.0
    assert terms[1].path == str(reward_file) and terms[1].function == "length" and terms[1].timeout_s == 5
    with Runner.from_config(shipped, build_registry(shipped)) as again:
        assert [t.name for t in again.terms] == ["mv", "length"]
        assert all(t.policy.executor != "ray" for t in again.terms)


def test_import_is_light():
    code = "import rewardhub.distributed, rewardhub._commands.doctor, sys; print('ray' in sys.modules)"
    assert (
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout.strip()
        == "False"
    )


def test_a_setup_made_elsewhere_carries_the_drivers_values(reward_file):
    """prepare_setup(reference=...) in another process (the trainer's reward client): the workers are
    held to the driver's items, targets and file bytes, never to that process's own registry."""
    cfg = {"rewards": [{"name": "math_verify"}, {"path": str(reward_file), "function": "length"},
                       {"name": "exact_match"}]}
    driver, _ = prepare_setup(cfg)
    # what the driver's process saw: another rewardhub-math, and math_verify at another target
    driver = driver.__class__(
        **{
            **driver.__dict__,
            "driver_fingerprint": "f" * 16,
            "driver_items": dict(driver.driver_items, math_verify="rewardhub-math==9.9"),
            "driver_targets": dict(driver.driver_targets, exact_match="elsewhere:exact"),
        }
    )
    here, _ = prepare_setup({**cfg, "rewards": cfg["rewards"][:2]}, pool="p", reference=driver)
    assert (here.driver_fingerprint, here.pool) == ("f" * 16, "p")
    assert here.driver_items == driver.driver_items and here.used == ("math_verify", "length")
    assert here.driver_targets == {"math_verify": "rewardhub_math.reward:math_verify"}  # the used ones only
    assert here.files == driver.files and here.files[0].data == reward_file.read_bytes()
    (p,) = RewardWorker(here, load=False).hello()["problems"]
    assert (p["reward"], p["kind"], p["driver"], p["worker"]) == (
        "math_verify",
        "version",
        "rewardhub-math==9.9",
        "rewardhub-math==0.1.0",
    )
    # without the reference this process's own registry is the reference: no difference is found
    own, _ = prepare_setup({**cfg, "rewards": cfg["rewards"][:2]})
    assert RewardWorker(own, load=False).hello()["ok"]


def test_a_score_call_is_bounded_by_its_terms_timeouts_times_its_samples():
    """Each sample's call of each term ends within ``timeout_s * (1 + retries)``, even one after another:
    a chunk's bound is their sum plus the slack; a term without a timeout leaves it unbounded, and
    reward.workers.call_timeout_s, when set, is the bound."""
    from rewardhub.distributed._dispatch import CALL_SLACK_S
    from rewardhub.distributed._dispatch import call_bound

    terms = [{"name": "a", "timeout_s": 2.0, "retries": 1}, {"name": "b", "timeout_s": 0.5, "retries": 0}]
    assert call_bound(terms, 8, None) == CALL_SLACK_S + 8 * (2.0 * 2 + 0.5)
    assert call_bound(terms, 8, 7.0) == 7.0
    assert call_bound([*terms, {"name": "c", "timeout_s": None}], 8, None) is None
    assert call_bound([*terms, {"name": "c", "timeout_s": None}], 8, 7.0) == 7.0
