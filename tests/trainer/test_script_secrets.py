"""A verl launch script's ``api_key=$MY_SECRET``: the reward gets the secret at run time, and no file the
run or ``rewardhub migrate`` writes holds it (the reference ``${oc.env:MY_SECRET}`` is written, as for a
YAML config's ``${oc.env:}``)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

#: base64-like, with the characters a secret has ('+', '/', '=')
SECRET = "sk-live+7f3a9c/Zq=="

#: the reward scores 1.0 only when every kwarg carries the secret (it holds the secret's hash only)
CHECK_KEY = f'''import hashlib

WANT = {hashlib.sha256(SECRET.encode()).hexdigest()!r}


def _is(value, prefix=""):
    return isinstance(value, str) and value.startswith(prefix) and \\
        hashlib.sha256(value[len(prefix):].encode()).hexdigest() == WANT


def check_key(data_source, solution_str, ground_truth, extra_info=None, api_key=None, auth=None,
              header_key=None):
    return float(_is(api_key) and _is(auth, "Bearer ") and _is(header_key))
'''

#: the secret three ways: directly, through a variable the script sets from it, inside a word list
SCRIPT = """\
#!/bin/bash
set -e
TOKEN=$MY_SECRET
ARGS="+custom_reward_function.reward_kwargs.header_key=$MY_SECRET actor_rollout_ref.rollout.n=4"
python3 -m verl.trainer.main_ppo \\
    custom_reward_function.path=check_key.py \\
    custom_reward_function.name=check_key \\
    +custom_reward_function.reward_kwargs.api_key=$MY_SECRET \\
    +custom_reward_function.reward_kwargs.auth="Bearer ${TOKEN}" \\
    $ARGS
"""

TINY = ["model.tiny.arch=qwen2", "model.tiny.hidden_size=32", "model.tiny.num_hidden_layers=1",
        "model.tiny.num_attention_heads=1", "model.tiny.num_key_value_heads=1", "data.source=builtin",
        "data.size=8", "rollout.prompts_per_step=2", "rollout.max_new_tokens=4", "trainer.total_steps=2"]


@pytest.fixture
def script(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_SECRET", SECRET)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "check_key.py").write_text(CHECK_KEY)
    (tmp_path / "run.sh").write_text(SCRIPT)
    return tmp_path / "run.sh"


def _holding_secret(folder: Path) -> list[str]:
    return [str(p.relative_to(folder)) for p in sorted(folder.rglob("*"))
            if p.is_file() and SECRET.encode() in p.read_bytes()]


@pytest.mark.timeout(180)
@pytest.mark.filterwarnings("ignore::rewardhub.RewardhubDeprecationWarning")  # the script's legacy keys
def test_a_launch_scripts_secret_reaches_the_reward_and_no_written_config(script, tmp_path, model_cache):
    from rewardhub.config import load_plan
    from rewardhub.execution import Runner
    from rewardhub_trainer.prepare import prepare
    from rewardhub_trainer.runfolder import begin

    plan = load_plan(str(script), TINY)
    kwargs = plan.reward.rewards[0].kwargs
    assert kwargs == {"api_key": SECRET, "auth": f"Bearer {SECRET}", "header_key": SECRET}  # at run time
    with Runner.from_config(plan.reward) as runner:
        assert runner.score([{"prompt": "p", "response": "r", "ground_truth": "g"}]).scores == [1.0]

    prep = prepare(plan)
    public = prep.public_config()
    assert public["reward"]["rewards"][0]["kwargs"] == {
        "api_key": "${oc.env:MY_SECRET}", "auth": "Bearer ${oc.env:MY_SECRET}",
        "header_key": "${oc.env:MY_SECRET}"}
    out = tmp_path / "run"
    out.mkdir()
    begin(out, public, overwrite=False, resumed_here=False)  # run.json, as the trainer writes it
    assert (out / "run.json").is_file() and _holding_secret(out) == []

    for args in ([], ["--report", "json"]):  # what migrate prints
        res = subprocess.run([sys.executable, "-m", "rewardhub", "migrate", str(script), *args],
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        assert SECRET not in res.stdout + res.stderr and "${oc.env:MY_SECRET}" in res.stdout


@pytest.mark.ray
@pytest.mark.timeout(420)
@pytest.mark.filterwarnings("ignore::rewardhub.RewardhubDeprecationWarning")
def test_a_training_run_from_the_script_scores_with_the_secret_and_writes_it_nowhere(script, tmp_path,
                                                                                     ray_session):
    from rewardhub_trainer.cli import train

    out = tmp_path / "out"
    summary = train(str(script), TINY + ["trainer.checkpoint_every=1"], output=str(out))
    assert summary["steps"] == 2
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [s["rewards/check_key/mean"] for s in steps] == [1.0, 1.0]  # the reward had the secret
    assert (out / "checkpoints" / "step_000002").is_dir()
    assert _holding_secret(out) == []  # run.json, checkpoints, metrics, trackers
