"""Bad values fail before Ray starts (issue 27 §5): every numeric key of every section has a range in
the one validator (``rewardhub.config.fields``), NaN is never a value, infinity only where a rule says
so; each bad value is one ``ERROR:`` line and exit code 2 from ``rewardhub train``, before Ray or torch
is imported. Also the settings the learner or an engine cannot honour (``rollout.top_k`` with vLLM)."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from rewardhub.config import schema as reward_schema
from rewardhub.config.fields import Rule
from rewardhub.errors import UsageError
from rewardhub_trainer import config as trainer_config
from rewardhub_trainer import config_checks
from rewardhub_trainer import placement
from rewardhub_trainer.config import parse_config

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

#: the real CLI (rewardhub's console script calls this main) in a fresh interpreter
PROBE = """
import json, sys
from rewardhub.cli import main
rc = main(["train", *sys.argv[1:]])
print(json.dumps({"rc": rc, "ray_imported": "ray" in sys.modules, "torch_imported": "torch" in sys.modules}))
"""


def _train(tmp_path: Path, *overrides: str) -> tuple[dict, str]:
    out = tmp_path / "o"
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            PROBE,
            str(EXAMPLES / "tiny.yaml"),
            *overrides,
            "--output",
            str(out),
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert not out.exists()
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def _one_error_line(err: str) -> str:
    assert "Traceback" not in err, err
    errors = [ln for ln in err.splitlines() if ln.startswith("ERROR: ")]
    assert len(errors) == 1 and err.startswith("ERROR: "), err
    assert all(ln.startswith("  ") for ln in err.splitlines()[1:]), err  # only the indented hint follows
    return errors[0]


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("override", "line", "hint"),
    [
        ("trainer.lr=nan", "trainer.lr=nan is not valid: not a number", "allowed: a value > 0"),
        (
            "trainer.weight_decay=nan",
            "trainer.weight_decay=nan is not valid: not a number",
            "allowed: a value >= 0",
        ),
        ("trainer.lr=inf", "trainer.lr=inf is not valid: not a finite number", "allowed: a value > 0"),
        (
            "trainer.clip_eps=nan",
            "trainer.clip_eps=nan is not valid: not a number",
            "allowed: a value > 0 and < 1",
        ),
        (
            "trainer.kl_coef=inf",
            "trainer.kl_coef=inf is not valid: not a finite number",
            "allowed: a value >= 0",
        ),
        (
            "rollout.temperature=nan",
            "rollout.temperature=nan is not valid: not a number",
            "allowed: a value > 0",
        ),
        (
            "rollout.top_p=nan",
            "rollout.top_p=nan is not valid: not a number",
            "allowed: a value > 0 and <= 1",
        ),
        (
            "trainer.max_grad_norm=-1",
            "trainer.max_grad_norm=-1.0 is not valid: the gradient's norm is clipped to it (0: not clipped)",
            "allowed: a value >= 0",
        ),
        (
            "data.train_files=''",
            "data.train_files='' is not valid: an empty path names no file",
            "give a file or folder, or leave data.train_files out (the prompts then come from data.source)",
        ),
        (
            "trainer.clip_ratio_c=1",
            "trainer.clip_ratio_c=1.0 is not valid: the dual clip bounds a negative advantage's "
            "loss at clip_ratio_c * |A|; 0: off",
            "allowed: a value > 1, or 0",
        ),
        (
            "reward.rewards=[{name: regex_match, weight: .nan}]",
            "reward.rewards[0].weight=nan is not valid: not a number",
            "allowed: a finite number",
        ),
        (
            "reward.rewards=[{name: regex_match, timeout_s: .inf}]",
            "reward.rewards[0].timeout_s=inf is not valid: not a finite number",
            "allowed: a value > 0",
        ),
    ],
)
def test_each_bad_value_is_one_error_line_before_ray(tmp_path, override, line, hint):
    result, err = _train(tmp_path, override)
    assert result == {"rc": 2, "ray_imported": False, "torch_imported": False}
    assert _one_error_line(err) == "ERROR: " + line
    assert err.splitlines()[1] == "  " + hint


@pytest.mark.timeout(120)
def test_vllm_with_top_k_is_refused_with_the_reason(tmp_path):
    """vLLM records log-probs after top-k truncation; the learner's are over the whole vocabulary. The
    refusal is the config's (like top_p < 1), so it comes before the engine probe and Ray."""
    result, err = _train(tmp_path, "rollout.engine=vllm", "rollout.top_k=5")
    assert result["rc"] == 2 and not result["ray_imported"]
    assert _one_error_line(err) == (
        "ERROR: rollout.top_k=5 is not valid: with rollout.engine=vllm it is not supported: "
        "vLLM records the log-probs of the truncated (top-k renormalised) distribution "
        "while the learner computes them over the whole vocabulary, so the PPO ratio "
        "would be wrong from the first step"
    )
    assert "rollout.top_k=-1 (or 0) with vllm, or rollout.engine=transformers" in err
    base = {"model": {"tiny": {"arch": "qwen2"}}, "reward": {"rewards": [{"name": "exact_match"}]}}
    for top_k in (-1, 0):  # all tokens: allowed with vllm
        assert parse_config({**base, "rollout": {"engine": "vllm", "top_k": top_k}}).rollout.top_k == top_k
    assert parse_config({**base, "rollout": {"engine": "transformers", "top_k": 5}}).rollout.top_k == 5


# -- every numeric key ------------------------------------------------------------------------------------


def _numeric(cls: type) -> list[tuple[str, type]]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        typ = hints[f.name]
        args = [a for a in typing.get_args(typ) if a is not type(None)] or [typ]
        if len(args) == 1 and args[0] in (int, float):
            out.append((f.name, args[0]))
    return out


def _keys() -> list[tuple[str, type, Rule | None]]:
    """(dotted key, its type, its rule) for every int or float key of every section."""
    out = []
    for section, cls in (("trainer", trainer_config.TrainerConfig), ("rollout", trainer_config.RolloutConfig),
                         ("data", trainer_config.DataConfig), ("model", trainer_config.ModelConfig)):
        out += [(f"{section}.{k}", t, trainer_config.RULES[section].get(k)) for k, t in _numeric(cls)]
    out += [(f"model.tiny.{k}", int, rule) for k, rule in config_checks.TINY_RULES.items()]
    out += [(f"resources.{k}", t, placement.RULES.get(k)) for k, t in _numeric(placement.Resources)]
    for role in placement.ROLES:
        out += [(f"resources.{role}.{k}", t, placement.RULES.get(f"{role}.{k}"))
                for k, t in _numeric(placement.RoleResources)]
        out.append((f"resources.{role}.resources.gpu_a", float, placement.RULES.get(f"{role}.resources.*")))
    out += [(f"reward.rewards.{k}", t, reward_schema.RULES.get(f"rewards.*.{k}"))
            for k, t in _numeric(reward_schema.TermConfig)]
    for name, cls in (
        ("workers", reward_schema.WorkersConfig),
        ("reward_model", reward_schema.RewardModelConfig),
        ("sandbox", reward_schema.SandboxConfig),
    ):
        out += [(f"reward.{name}.{k}", t, reward_schema.RULES.get(f"{name}.{k}")) for k, t in _numeric(cls)]
    out.append(("reward.workers.resources.gpu_a", float, reward_schema.RULES.get("workers.resources.*")))
    return out


KEYS = _keys()


def _check(key: str, value: object) -> None:
    """Validate a config that sets ``key`` to ``value`` (through the validator that owns the section)."""
    parts = key.split(".")
    if parts[0] == "reward":
        if parts[1] == "rewards":
            section: dict = {"rewards": [{"name": "exact_match", parts[2]: value}]}
        else:
            section = {"rewards": [{"name": "exact_match"}]}
            node = section
            for p in parts[1:-1]:
                node = node.setdefault(p, {})
            node[parts[-1]] = value
        reward_schema.validate_reward(section)
        return
    # one head of one key/value head: any hidden size >= 2 fits it (the sizes are checked together too)
    tiny = {"arch": "qwen2", "num_attention_heads": 1, "num_key_value_heads": 1}
    cfg: dict = {"model": {"tiny": tiny}, "reward": {"rewards": [{"name": "exact_match"}]}}
    node = cfg
    for p in parts[:-1]:
        node = node.setdefault(p, {})
    node[parts[-1]] = value
    parse_config(cfg)


def _shown(key: str) -> str:
    return key.replace("reward.rewards.", "reward.rewards[0].")


def test_the_sweep_sees_every_section():
    assert len(KEYS) > 50
    for key in ("trainer.lr", "trainer.seed", "rollout.top_k", "data.size", "model.tiny.hidden_size",
                "resources.learner.num_gpus", "reward.rewards.weight", "reward.rewards.timeout_s",
                "reward.sandbox.timeout_s", "reward.reward_model.nnodes"):
        assert key in [k for k, _, _ in KEYS], key


@pytest.mark.parametrize(("key", "typ", "rule"), KEYS, ids=[k for k, _, _ in KEYS])
def test_every_numeric_key_has_a_range_and_refuses_nan_and_inf(key, typ, rule):
    assert rule is not None, f"{key} has no rule in its section's RULES table"
    shown = _shown(key)
    for bad in (math.nan, math.inf, -math.inf, "nan", "inf"):
        if rule.infinite and bad in (math.inf, -math.inf, "inf"):
            continue
        with pytest.raises(UsageError) as err:
            _check(key, bad)
        text = str(err.value)
        assert text.startswith(f"{shown}=") and " is not valid" in text, text
        if typ is float:
            assert "not a number" in text or "not a finite number" in text, text
        else:
            assert "expected an integer" in text, text
    # just outside each bound: refused, naming the allowed range; the bound itself, where allowed: accepted
    if rule.minimum is not None:
        low = rule.minimum if not rule.minimum_inclusive else rule.minimum - (1 if typ is int else 0.5)
        if low not in rule.also:
            with pytest.raises(UsageError, match="allowed: " + rule.describe().replace("*", r"\*")):
                _check(key, typ(low))
        if rule.minimum_inclusive:
            _check(key, typ(rule.minimum))
    if rule.maximum is not None:
        high = rule.maximum if not rule.maximum_inclusive else rule.maximum + (1 if typ is int else 0.5)
        with pytest.raises(UsageError, match="allowed: "):
            _check(key, typ(high))
        if rule.maximum_inclusive:
            _check(key, typ(rule.maximum))
    for value in rule.also:
        _check(key, typ(value))


def test_zero_max_grad_norm_measures_without_clipping_and_clip_ratio_c_defaults_to_verls():
    base = {"model": {"tiny": {"arch": "qwen2"}}, "reward": {"rewards": [{"name": "exact_match"}]}}
    assert parse_config(base).trainer.clip_ratio_c == 3.0
    assert parse_config({**base, "trainer": {"clip_ratio_c": 0}}).trainer.clip_ratio_c == 0.0
    assert parse_config({**base, "trainer": {"max_grad_norm": 0}}).trainer.max_grad_norm == 0.0
    with pytest.raises(
        UsageError, match=r"trainer.clip_ratio_c=0.5 is not valid.*\nallowed: a value > 1, or 0"
    ):
        parse_config({**base, "trainer": {"clip_ratio_c": 0.5}})
    with pytest.raises(UsageError, match=r"data.val_files=\['a.jsonl', ''\] is not valid: an empty path"):
        parse_config({**base, "data": {"val_files": ["a.jsonl", ""]}})
