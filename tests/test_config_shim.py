"""The legacy shim: every verl spelling moved or dropped, nothing lost, idempotent, pure, conflicts named."""

from __future__ import annotations

import copy
import shlex
import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml
from config_shim_helpers import get_path
from config_shim_helpers import quiet_migrate

from rewardhub.config.overrides import apply_overrides
from rewardhub.config.schema import validate_reward
from rewardhub.errors import UsageError
from rewardhub.verl.shim import is_legacy_key
from rewardhub.verl.shim import legacy_keys
from rewardhub.verl.shim import migrate

SHARED = Path(__file__).resolve().parent / "data" / "legacy-examples"  # a copy of ../shared/legacy-examples
OWN = Path(__file__).resolve().parent / "data" / "legacy"


def read_example(path: Path) -> dict[str, Any]:
    if path.suffix == ".yaml":
        return yaml.safe_load(path.read_text())
    tokens = [shlex.split(line)[0] for line in path.read_text().splitlines() if line.strip()]
    return apply_overrides({}, tokens)


def examples() -> list[Path]:
    found = sorted(p for p in SHARED.glob("*") if p.suffix in (".yaml", ".overrides"))
    found += sorted(OWN.glob("*.yaml"))
    return found


def leaves(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, dict) and node:
        out: dict[str, Any] = {}
        for k, v in node.items():
            out.update(leaves(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: node}


def test_the_examples_are_there():
    names = {p.name for p in examples()}
    assert {"disrm-colocate.overrides", "genrm-dapo-custom-fn.overrides", "top-level-custom-fn.yaml",
            "verl-0.5-defaults.yaml", "verl-0.7-reward-section.yaml"} <= names


@pytest.mark.parametrize("path", examples(), ids=lambda p: p.name)
def test_every_example_migrates_with_nothing_lost(path):
    original = read_example(path)
    pristine = copy.deepcopy(original)
    legacy = legacy_keys(original)
    assert legacy, "the example has legacy keys"

    new, report, msgs = quiet_migrate(original)

    assert original == pristine, "the input is not mutated"
    assert legacy_keys(new) == [], "no legacy node remains"
    validate_reward(new.get("reward"))  # the result is a valid reward: section
    # each legacy key is accounted for exactly once: moved or dropped
    accounted = [m["from"] for m in report.moved] + [d["key"] for d in report.dropped]
    assert sorted(accounted) == sorted(legacy)
    # one warning per legacy key, naming it
    assert len(msgs) == len(legacy)
    for key in legacy:
        assert any(key in m for m in msgs), key
    # every value survives: at its new key, or in the dropped list
    old_values = {}
    for key in legacy:
        node: Any = original
        for part in key.split("."):
            node = node[part]
        old_values[key] = node
    for d in report.dropped:
        assert d["value"] == old_values[d["key"]] and d["reason"]
    for m in report.moved:
        target = get_path(new, m["to"])
        value = old_values[m["from"]]
        if isinstance(target, dict) and m["to"].endswith("]"):
            continue  # a whole new term (the overlong penalty's `enable`)
        assert (
            target == value
            or (m["to"].endswith(".engine") and str(value) in ("vllm", "hf", "transformers"))
            or m["to"] == "reward.manager"
        ), m
    # other sections are untouched
    for key, value in original.items():
        if key not in (
            "reward",
            "custom_reward_function",
            "reward_model",
            "sandbox_fusion",
            "reward_manager",
        ):
            assert new[key] == value

    again, report2, msgs2 = quiet_migrate(new)
    assert again == new and not report2.moved and not report2.dropped and msgs2 == []


# ---- conflicts and agreement ------------------------------------------------------------------------

CONFLICTS = [
    (
        ["reward_model.sandbox_fusion.url=http://a", "reward.sandbox.url=http://b"],
        ["reward_model.sandbox_fusion.url", "reward.sandbox.url"],
    ),
    (
        ["sandbox_fusion.url=http://a", "reward_model.sandbox_fusion.url=http://b"],
        ["sandbox_fusion.url", "reward_model.sandbox_fusion.url"],
    ),
    (
        ["reward_model.reward_manager=prime", "reward_manager.name=naive"],
        ["reward_model.reward_manager", "reward_manager.name"],
    ),
    (
        ["reward_model.reward_manager=prime", "reward.manager=naive"],
        ["reward_model.reward_manager", "reward.manager"],
    ),
    (
        ["custom_reward_function.path=a.py", "reward.custom_reward_function.path=b.py"],
        ["custom_reward_function.path", "reward.custom_reward_function.path"],
    ),
    (
        [
            "custom_reward_function.path=a.py",
            "+custom_reward_function.reward_kwargs.k=1",
            "+reward.rewards.0.path=a.py",
            "+reward.rewards.0.function=compute_score",
            "+reward.rewards.0.kwargs.k=2",
        ],
        ["custom_reward_function.reward_kwargs.k", "reward.rewards[0].kwargs.k"],
    ),
    (
        ["reward_model.model.path=/a", "reward.reward_model.model_path=/b"],
        ["reward_model.model.path", "reward.reward_model.model_path"],
    ),
    (
        ["reward.num_workers=2", "reward.workers.num_workers=3"],
        ["reward.num_workers", "reward.workers.num_workers"],
    ),
    (
        [
            "custom_reward_function.path=a.py",
            "reward_model.reward_manager=prime",
            "+reward.rewards.0.path=a.py",
            "+reward.rewards.0.executor=thread",
        ],
        ["'prime' reward manager", "reward.rewards[0].executor"],
    ),
]


@pytest.mark.parametrize("overrides,named", CONFLICTS, ids=[c[0][-1] for c in CONFLICTS])
def test_conflict_names_both_keys(overrides, named):
    cfg = apply_overrides({}, overrides)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(UsageError) as info:
            migrate(cfg)
    for key in named:
        assert key in str(info.value)


AGREEMENTS = [
    ["reward_model.sandbox_fusion.url=http://a", "reward.sandbox.url=http://a"],
    ["reward_model.reward_manager=prime", "reward_manager.name=prime"],
    [
        "custom_reward_function.path=a.py",
        "+reward.rewards.0.path=a.py",
        "+reward.rewards.0.function=compute_score",
    ],
    ["reward_model.model.path=/a", "reward.reward_model.model_path=/a"],
]


@pytest.mark.parametrize("overrides", AGREEMENTS, ids=[a[-1] for a in AGREEMENTS])
def test_equal_old_and_new_values_are_fine(overrides):
    new, report, _ = quiet_migrate(apply_overrides({}, overrides))
    assert legacy_keys(new) == []
    assert len(new["reward"].get("rewards", [])) <= 1  # the same term is not added twice
    assert report.moved


def test_overlong_without_any_length_is_an_error_naming_the_key():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(UsageError, match="max_resp_len"):
            migrate(apply_overrides({}, ["+reward_model.reward_kwargs.overlong_buffer_cfg.enable=True"]))


def test_nothing_to_migrate_gives_the_same_config_and_an_empty_report():
    cfg = {"reward": {"rewards": [{"name": "math_verify"}]}, "trainer": {"mode": "sync"}}
    new, report, msgs = quiet_migrate(cfg)
    assert new == cfg and new is not cfg and not report and msgs == []


@pytest.mark.parametrize("key,legacy", [
    ("custom_reward_function.path", True), ("reward_model.enable", True), ("sandbox_fusion.url", True),
    ("reward_manager.name", True), ("reward.num_workers", True), ("reward.reward_kwargs.x", True),
    ("reward.reward_model.use_reward_loop", True), ("reward.reward_model.model_path", False),
    ("reward.rewards.0.path", False), ("reward.sandbox.url", False), ("trainer.mode", False),
])
def test_is_legacy_key(key, legacy):
    assert is_legacy_key(key) is legacy
