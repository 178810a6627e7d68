"""Exported rewards run under the real TRL GRPOTrainer reward path and verl's calling convention."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest

from rewardhub.adapters import to_trl
from rewardhub.adapters import to_verl


def _trl_calculate_rewards(reward_funcs, inputs, prompts, completions, environments=None):
    """Call TRL's own GRPOTrainer._calculate_rewards with a minimal trainer object (``environments``:
    what its ``environment_factory`` made, one per completion)."""
    torch = pytest.importorskip("torch")
    from trl import GRPOTrainer

    fake = SimpleNamespace(
        accelerator=SimpleNamespace(device="cpu", is_main_process=True),
        reward_funcs=reward_funcs,
        reward_processing_classes=[None] * len(reward_funcs),
        reward_func_names=[f.__name__ for f in reward_funcs],
        state=SimpleNamespace(global_step=0),
        _log_completion_extra=lambda *a, **k: None,
        _log_metric=lambda *a, **k: None,
        environments=environments,
        args=SimpleNamespace(report_to=[]),
        _metrics={"train": {}},
        control=SimpleNamespace(should_evaluate=False),
        model=SimpleNamespace(training=True),
    )
    out = GRPOTrainer._calculate_rewards(fake, inputs, prompts, completions, [[1]] * len(completions))
    assert isinstance(out, torch.Tensor)
    return out.tolist()


def test_trl_reward_func_inside_trl():
    prompts = ["What is 2+2?", "What is 3+3?", [{"role": "user", "content": "1+1?"}]]
    completions = ["\\boxed{4}", "it is 7", [{"role": "assistant", "content": "\\boxed{2}"}]]
    inputs = [{"prompt": p, "solution": s, "data_source": "math"} for p, s in zip(prompts, ["4", "6", "2"])]
    fns = [
        to_trl("math_verify", executor="thread", timeout_s=20),
        to_trl("regex_match", kwargs={"pattern": "boxed"}),
    ]
    assert [f.__name__ for f in fns] == ["math_verify", "regex_match"]
    rows = _trl_calculate_rewards(fns, inputs, prompts, completions)
    assert rows == [[1.0, 1.0], [0.0, 0.0], [1.0, 1.0]]


def test_verl_compute_score_signature_and_values():
    compute_score = to_verl("math_verify", executor="inline")
    params = list(inspect.signature(compute_score).parameters)
    assert params[:4] == ["data_source", "solution_str", "ground_truth", "extra_info"]
    # verl's naive reward manager calls it with keywords
    got = compute_score(data_source="openai/gsm8k", solution_str="... #### so 72", ground_truth="72",
                        extra_info={"index": 0})
    assert got == {"score": 1.0, "acc": 1.0, "extracted": 1.0, "rewardhub_failed": 0.0, "rewardhub_error": ""}
    assert to_verl("exact_match")("x", "paris", "Paris")["score"] == 1.0


VERL_COMPAT = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".venv", "verl-compat"
)

VERL_CHECK = r'''
import json, os, sys
from omegaconf import OmegaConf
from verl.trainer.ppo.reward import get_custom_reward_fn
from verl.workers.reward_manager.naive import NaiveRewardManager

# verl loads the exported reward from a file, exactly as a user's custom_reward_function
cfg = OmegaConf.create({"reward": {"custom_reward_function": {"path": sys.argv[1], "name": "compute_score",
                                                              "reward_kwargs": {}}}})
fn = get_custom_reward_fn(cfg)
manager = NaiveRewardManager(tokenizer=None, num_examine=0, compute_score=fn)
out = []
# the keyword call NaiveRewardManager makes for every sample
for solution, gold in [("so the answer is \\boxed{72}", "72"), ("it is 71", "72")]:
    out.append(manager.compute_score(data_source="openai/gsm8k", solution_str=solution, ground_truth=gold,
                                     extra_info={"index": 0, "num_turns": None, "rollout_reward_scores": {}}))
print(json.dumps(out))
'''


def _verl_env():
    if not os.path.isdir(os.path.join(VERL_COMPAT, "verl")):
        pytest.skip("verl's reward modules are not installed (make install puts them in .venv/verl-compat)")
    return dict(os.environ, PYTHONPATH=os.pathsep.join([VERL_COMPAT, os.environ.get("PYTHONPATH", "")]),
                RAY_USAGE_STATS_ENABLED="0")


def test_to_verl_inside_real_verl(tmp_path):
    """Real verl loads ``compute_score = to_verl(...)`` through its custom_reward_function loader."""
    env = _verl_env()
    module = tmp_path / "my_reward.py"
    module.write_text(
        "from rewardhub.adapters import to_verl\ncompute_score = to_verl('math_verify', executor='inline')\n"
    )
    check = tmp_path / "check.py"
    check.write_text(VERL_CHECK)
    res = subprocess.run([sys.executable, str(check), str(module)], capture_output=True, text=True, env=env,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    ok = {"rewardhub_failed": 0.0, "rewardhub_error": ""}
    assert json.loads(res.stdout.strip().splitlines()[-1]) == [
        {"score": 1.0, "acc": 1.0, "extracted": 1.0, **ok},
        {"score": 0.0, "acc": 0.0, "extracted": 1.0, **ok},
    ]


def test_real_verl_compute_score_runs_unchanged(tmp_path):
    """verl's own gsm8k ``compute_score(solution_str, ground_truth, ...)`` as a rewardhub term."""
    env = _verl_env()
    script = textwrap.dedent("""
        import json
        from rewardhub.execution import Runner
        terms = [{"module": "verl.utils.reward_score.gsm8k", "function": "compute_score", "alias": "gsm8k"},
                 {"module": "verl.utils.reward_score.gsm8k", "function": "compute_score", "alias": "gsm8k_p",
                  "executor": "process", "timeout_s": 30}]
        with Runner.from_config({"rewards": terms}) as r:
            rows = [{"response": "so #### 72", "ground_truth": "72"},
                    {"response": "#### 7", "ground_truth": "72"}]
            res = r.score(rows)
            print(json.dumps([res.rewards, [f.adapter for f in r.facts]]))
    """)
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    rewards, adapters = json.loads(res.stdout.strip().splitlines()[-1])
    assert rewards == [{"gsm8k": 1.0, "gsm8k_p": 1.0}, {"gsm8k": 0.0, "gsm8k_p": 0.0}]
    assert adapters == ["verl", "verl"]
