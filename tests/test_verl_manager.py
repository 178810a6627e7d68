"""The ``rewardhub`` verl reward manager against real verl 0.9.1: registered through verl's own
plugin entry point, selected by ``reward.reward_manager.name=rewardhub``, scoring ``DataProto``
batches through the Runner with the same scores as verl's own managers."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

VERL_COMPAT = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".venv", "verl-compat"
)

COMMON = r'''
import asyncio, json, sys, time
import numpy as np
import torch
from omegaconf import OmegaConf
from verl import DataProto


class CharTokenizer:
    """One token per character (0 pads): verl's managers only decode."""

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(int(i)) for i in ids if int(i) != 0)

    def batch_decode(self, seqs, skip_special_tokens=True):
        return [self.decode(s) for s in seqs]


def batch(rows, P=12, R=48):
    prompts, responses, mask = [], [], []
    for prompt, resp, _ in rows:
        p, r = [ord(c) for c in prompt][-P:], [ord(c) for c in resp][:R]
        prompts.append([0] * (P - len(p)) + p)
        responses.append(r + [0] * (R - len(r)))
        mask.append([0] * (P - len(p)) + [1] * (len(p) + len(r)) + [0] * (R - len(r)))
    n = len(rows)
    return DataProto.from_dict(
        tensors={"prompts": torch.tensor(prompts), "responses": torch.tensor(responses),
                 "attention_mask": torch.tensor(mask)},
        non_tensors={"data_source": np.array(["openai/gsm8k"] * n, dtype=object),
                     "reward_model": np.array([{"ground_truth": gt} for _, _, gt in rows], dtype=object),
                     "extra_info": np.array([{"index": i} for i in range(n)], dtype=object)})


def config(path=None, module_path=None):
    return OmegaConf.create({"reward": {
        "custom_reward_function": {"path": path, "name": "compute_score", "reward_kwargs": {}},
        "reward_manager": {"source": "register", "name": "rewardhub",
                           "module": {"path": module_path, "name": "x"}},
        "reward_model": {"enable": False}, "sandbox_fusion": {"url": None}}})


def run_loop(manager, data):
    """What verl's RewardLoopWorker.compute_score_batch does: every row's run_single at once."""
    async def go():
        return await asyncio.gather(*(asyncio.create_task(manager.run_single(data[i:i + 1]))
                                      for i in range(len(data))))
    return manager.loop.run_until_complete(go())


ROWS = [("2+3=", "so the answer is #### 5", "5"), ("6*7=", "I get #### 41", "42"),
        ("9-1=", "#### 8", "8"), ("1+1=", "no final answer", "2")] * 8
'''

LOOP_CHECK = COMMON + r'''
from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager
from verl.trainer.ppo.reward import load_reward_manager
from verl.experimental.reward_loop.reward_manager.registry import REWARD_MANAGER

assert "rewardhub" in REWARD_MANAGER  # what verl's RewardManagerConfig asserts for source=register
cfg = config(sys.argv[1] if len(sys.argv) > 1 else None)
tok = CharTokenizer()
ours = load_reward_manager(cfg, tok, reward_router_address=None, reward_model_tokenizer=None)
fn = None
if len(sys.argv) > 1:
    from verl.trainer.ppo.reward import get_custom_reward_fn
    fn = get_custom_reward_fn(cfg)
theirs = NaiveRewardManager(cfg, tok, fn)
data = batch(ROWS)
a = run_loop(ours, data)
b = run_loop(theirs, data)
print(json.dumps({"cls": type(ours).__name__, "ours": a, "theirs": b, "batches": ours.batches,
                  "batched": ours.batched_samples}, default=float))
'''

BATCH_CHECK = COMMON + r'''
from verl.workers.reward_manager import get_reward_manager_cls
from verl.workers.reward_manager.naive import NaiveRewardManager

tok = CharTokenizer()
data = batch(ROWS)
ours = get_reward_manager_cls("rewardhub")(tokenizer=tok, num_examine=0, config=config())
a = ours(data, return_dict=True)
b = NaiveRewardManager(tok, 0)(batch(ROWS), return_dict=True)
print(json.dumps({"equal": bool(torch.equal(a["reward_tensor"], b["reward_tensor"])),
                  "sums": [float(a["reward_tensor"].sum()), float(b["reward_tensor"].sum())],
                  "extra": {k: [x if isinstance(x, str) else float(x) for x in v]
                            for k, v in a["reward_extra_info"].items()}}))
'''


def _run(tmp_path, script, *args):
    if not os.path.isdir(os.path.join(VERL_COMPAT, "verl")):
        pytest.skip("verl is not installed for the tests (make install puts it in .venv/verl-compat)")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([VERL_COMPAT, os.environ.get("PYTHONPATH", "")]),
               RAY_USAGE_STATS_ENABLED="0")
    check = tmp_path / "check.py"
    check.write_text(script)
    res = subprocess.run(
        [sys.executable, str(check), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=str(tmp_path),
    )
    if res.returncode != 0 and "No module named" in res.stderr and "verl" not in res.stderr.splitlines()[-1]:
        pytest.skip(
            f"verl's reward loop needs a module the test environment lacks: {res.stderr.splitlines()[-1]}"
        )
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(300)
def test_reward_loop_manager_is_selected_by_name_and_matches_verl(tmp_path):
    out = _run(tmp_path, LOOP_CHECK)
    assert out["cls"] == "RewardhubLoopManager"
    ours = [r["reward_score"] for r in out["ours"]]
    assert ours == [r["reward_score"] for r in out["theirs"]] == [1.0, 0.0, 1.0, 0.0] * 8
    assert out["batches"] == 1 and out["batched"] == len(ours)  # one Runner call for the whole worker batch
    info = out["ours"][0]["reward_extra_info"]
    assert info["score"] == 1.0 and info["verl_default"] == 1.0
    assert {tuple(sorted(r["reward_extra_info"])) for r in out["ours"]} == {tuple(sorted(info))}


@pytest.mark.timeout(300)
def test_reward_loop_manager_carries_extra_metrics_of_a_custom_function(tmp_path):
    reward = tmp_path / "my_reward.py"
    reward.write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    ok = solution_str.strip().endswith(str(ground_truth))\n"
        "    return {'score': 2.0 if ok else -1.0, 'acc': float(ok), 'length': len(solution_str)}\n"
    )
    out = _run(tmp_path, LOOP_CHECK, str(reward))
    ours, theirs = out["ours"], out["theirs"]
    assert [r["reward_score"] for r in ours] == [r["reward_score"] for r in theirs]
    assert [r["reward_score"] for r in ours][:4] == [2.0, -1.0, 2.0, -1.0]
    for a, b in zip(ours, theirs):  # verl's extra keys, with the same values
        assert a["reward_extra_info"]["acc"] == b["reward_extra_info"]["acc"]
        assert a["reward_extra_info"]["length"] == b["reward_extra_info"]["length"]
        assert a["reward_extra_info"]["score"] == b["reward_extra_info"]["score"]


@pytest.mark.timeout(300)
def test_batch_manager_scores_a_dataproto_like_verls_naive_manager(tmp_path):
    out = _run(tmp_path, BATCH_CHECK)
    assert out["equal"], out["sums"]
    assert out["extra"]["score"] == [1.0, 0.0, 1.0, 0.0] * 8
    assert out["extra"]["verl_default"] == out["extra"]["score"] == out["extra"]["acc"]  # naive's acc too
    assert out["extra"]["rewardhub_failed"] == [0.0] * 32 and out["extra"]["rewardhub_error"] == [""] * 32


@pytest.mark.timeout(300)
def test_rewardhub_config_named_by_the_manager_module_path(tmp_path):
    """reward.reward_manager.module.path naming a rewardhub YAML: its terms, weights and policies."""
    cfg = tmp_path / "rh.yaml"
    cfg.write_text(
        "reward:\n  rewards:\n    - {module: verl.utils.reward_score.gsm8k, function: compute_score,"
        " alias: gsm8k, weight: 2.0, executor: process, timeout_s: 30}\n"
    )
    script = COMMON + r'''
from verl.trainer.ppo.reward import load_reward_manager
ours = load_reward_manager(config(None, sys.argv[1]), CharTokenizer(), reward_router_address=None,
                           reward_model_tokenizer=None)
out = run_loop(ours, batch(ROWS[:4]))
print(json.dumps([[r["reward_score"], r["reward_extra_info"]["gsm8k"]] for r in out]))
'''
    assert _run(tmp_path, script, str(cfg)) == [[2.0, 1.0], [0.0, 0.0], [2.0, 1.0], [0.0, 0.0]]
