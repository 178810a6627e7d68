"""The legacy shim: every verl spelling moved or dropped, nothing lost, idempotent, pure, conflicts named."""

from __future__ import annotations

import copy
import shlex
import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml

from rewardhub.config.overrides import apply_overrides
from rewardhub.config.schema import validate_reward
from rewardhub.errors import RewardhubDeprecationWarning
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


def quiet_migrate(cfg: Any) -> tuple[dict[str, Any], Any, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        new, report = migrate(cfg)
    msgs = [str(w.message) for w in caught if issubclass(w.category, RewardhubDeprecationWarning)]
    return new, report, msgs


def leaves(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, dict) and node:
        out: dict[str, Any] = {}
        for k, v in node.items():
            out.update(leaves(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: node}


def get_path(cfg: dict[str, Any], dotted: str) -> Any:
    node: Any = cfg
    for part in dotted.replace("[", ".").replace("]", "").split("."):
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


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


# ---- each mapping, table-driven --------------------------------------------------------------------

MAPPINGS = [
    # (overrides, expected values in the new config, dropped keys)
    (
        ["custom_reward_function.path=r.py", "custom_reward_function.name=score"],
        {"reward.rewards[0].path": "r.py", "reward.rewards[0].function": "score"},
        [],
    ),
    (["custom_reward_function.path=r.py"], {"reward.rewards[0].function": "compute_score"}, []),
    (
        ["custom_reward_function.path=r.py", "+custom_reward_function.reward_kwargs.k=2"],
        {"reward.rewards[0].kwargs.k": 2},
        [],
    ),
    (["reward.custom_reward_function.path=r.py"], {"reward.rewards[0].path": "r.py"}, []),
    (
        ["custom_reward_function.path=null", "custom_reward_function.name=compute_score"],
        {},
        ["custom_reward_function.path", "custom_reward_function.name"],
    ),
    (
        ["custom_reward_function.path=r.py", "reward_model.reward_manager=prime"],
        {"reward.manager": "prime", "reward.rewards[0].executor": "process"},
        [],
    ),
    (
        ["custom_reward_function.path=r.py", "reward_model.reward_manager=batch"],
        {"reward.rewards[0].kind": "batched"},
        [],
    ),
    (
        ["custom_reward_function.path=r.py", "reward_model.reward_manager=remote"],
        {"reward.rewards[0].executor": "ray"},
        [],
    ),
    (
        [
            "custom_reward_function.path=r.py",
            "reward_model.reward_manager=rate_limited",
            "+reward_model.reward_kwargs.max_concurrent=4",
            "+reward_model.reward_kwargs.max_rpm=60",
        ],
        {"reward.rewards[0].executor": "thread", "reward.rewards[0].max_concurrency": 4,
         "reward.rewards[0].max_rpm": 60},
        [],
    ),
    (  # verl charges each call estimated_tokens_per_request tokens: 90000 / 3000 = 30 calls a minute
        [
            "custom_reward_function.path=r.py",
            "reward_model.reward_manager=rate_limited",
            "+reward_model.reward_kwargs.max_rpm=60",
            "+reward_model.reward_kwargs.max_tpm=90000",
            "+reward_model.reward_kwargs.estimated_tokens_per_request=3000",
        ],
        {"reward.rewards[0].max_rpm": 30.0},
        [],
    ),
    (
        [
            "custom_reward_function.path=r.py",
            "reward_model.reward_manager=rate_limited",
            "+reward_model.reward_kwargs.max_tpm=100000",
        ],
        {"reward.rewards[0].max_rpm": 50.0},
        [],
    ),
    (
        ["custom_reward_function.path=r.py", "reward_model.reward_manager=naive"],
        {"reward.manager": "naive"},
        [],
    ),
    (["reward_model.reward_manager=my_manager"], {"reward.manager": "my_manager"}, []),
    (
        ["reward_manager.name=dapo", "reward_manager.source=register"],
        {"reward.manager": "dapo"},
        ["reward_manager.source"],
    ),
    (
        [
            "reward_model.reward_manager=dapo",
            "+reward_model.reward_kwargs.overlong_buffer_cfg.enable=True",
            "+reward_model.reward_kwargs.overlong_buffer_cfg.len=512",
            "+reward_model.reward_kwargs.overlong_buffer_cfg.penalty_factor=0.5",
            "+reward_model.reward_kwargs.max_resp_len=2048",
        ],
        {
            "reward.rewards[0].name": "overlong_penalty",
            "reward.rewards[0].kwargs": {
                "max_resp_len": 2048,
                "overlong_buffer_len": 512,
                "penalty_factor": 0.5,
            },
        },
        [],
    ),
    (
        [
            "reward_model.reward_manager=dapo",
            "+reward_model.reward_kwargs.overlong_buffer_cfg.enable=False",
            "+reward_model.reward_kwargs.overlong_buffer_cfg.len=512",
            "+reward_model.reward_kwargs.max_resp_len=2048",
        ],
        {"reward.manager": "dapo"},
        [
            "reward_model.reward_kwargs.overlong_buffer_cfg.enable",
            "reward_model.reward_kwargs.overlong_buffer_cfg.len",
            "reward_model.reward_kwargs.max_resp_len",
        ],
    ),
    (
        [
            "data.max_response_length=1000",
            "+reward_model.reward_kwargs.overlong_buffer_cfg.enable=True",
            "+reward_model.reward_kwargs.overlong_buffer_cfg.len=100",
        ],
        {"reward.rewards[0].kwargs.max_resp_len": 1000, "data.max_response_length": 1000},
        [],
    ),
    (
        ["custom_reward_function.path=r.py", "+reward_model.reward_kwargs.temperature=0.1"],
        {"reward.rewards[0].kwargs.temperature": 0.1},
        [],
    ),
    (["+reward_model.reward_kwargs.temperature=0.1"], {}, ["reward_model.reward_kwargs.temperature"]),
    (
        [
            "reward_model.enable=True",
            "reward_model.enable_resource_pool=True",
            "reward_model.n_gpus_per_node=8",
            "reward_model.nnodes=2",
            "reward_model.num_workers=3",
            "reward_model.model.path=/m",
            "reward_model.model.external_lib=mylib",
            "reward_model.model.trust_remote_code=True",
            "reward_model.max_length=4096",
            "reward_model.micro_batch_size_per_gpu=16",
        ],
        {
            "reward.reward_model": {
                "enable": True,
                "n_gpus_per_node": 8,
                "nnodes": 2,
                "num_workers": 3,
                "model_path": "/m",
                "external_lib": "mylib",
                "trust_remote_code": True,
                "max_length": 4096,
                "batch_size": 16,
            }
        },
        ["reward_model.enable_resource_pool"],
    ),
    (
        ["reward_model.enable=True", "reward_model.model.path=/m"],
        {"reward.rewards": [{"name": "reward_model"}], "reward.reward_model.model_path": "/m"},
        [],
    ),
    (
        ["reward_model.enable=True", "custom_reward_function.path=r.py"],
        {"reward.rewards": [{"path": "r.py", "function": "compute_score"}]},
        [],
    ),
    (["reward_model.enable=False", "reward_model.model.path=/m"], {"reward.reward_model.enable": False}, []),
    (
        ["reward_model.rollout.name=vllm", "reward_model.rollout.gpu_memory_utilization=0.5"],
        {"reward.reward_model.engine": "vllm", "reward.reward_model.rollout.gpu_memory_utilization": 0.5},
        [],
    ),
    (["reward_model.rollout.name=hf"], {"reward.reward_model.engine": "transformers"}, []),
    (["reward_model.rollout.name=sglang"], {"reward.reward_model.rollout.name": "sglang"}, []),
    (
        [
            "reward_model.strategy=fsdp",
            "reward_model.micro_batch_size=8",
            "reward_model.model.fsdp_config.param_offload=True",
            "reward_model.model.use_remove_padding=True",
            "reward_model.use_dynamic_bsz=True",
            "reward_model.use_reward_loop=True",
            "reward_model.launch_reward_fn_async=True",
            "reward_model.reward_loop_source=register",
            "reward_model.reward_loop_module_path=x.py",
            "reward_model.reward_loop_class_name=X",
            "reward_model.model.input_tokenizer=/tok",
        ],
        {},
        [
            "reward_model.strategy",
            "reward_model.micro_batch_size",
            "reward_model.model.fsdp_config.param_offload",
            "reward_model.model.use_remove_padding",
            "reward_model.use_dynamic_bsz",
            "reward_model.use_reward_loop",
            "reward_model.launch_reward_fn_async",
            "reward_model.reward_loop_source",
            "reward_model.reward_loop_module_path",
            "reward_model.reward_loop_class_name",
            "reward_model.model.input_tokenizer",
        ],
    ),
    (
        [
            "reward_model.sandbox_fusion.url=http://h/run_code",
            "reward_model.sandbox_fusion.max_concurrent=9",
            "reward_model.sandbox_fusion.memory_limit_mb=512",
        ],
        {"reward.sandbox": {"url": "http://h/run_code", "max_concurrent": 9, "memory_limit_mb": 512}},
        [],
    ),
    (
        ["sandbox_fusion.url=http://h/run_code", "sandbox_fusion.memory_limit_mb=64"],
        {"reward.sandbox": {"url": "http://h/run_code", "memory_limit_mb": 64}},
        [],
    ),
    (["reward.sandbox_fusion.url=http://h/run_code"], {"reward.sandbox.url": "http://h/run_code"}, []),
    (["reward.num_workers=4"], {"reward.workers.num_workers": 4}, []),
    (
        ["reward.reward_kwargs.x=1", "reward.custom_reward_function.path=r.py"],
        {"reward.rewards[0].kwargs.x": 1},
        [],
    ),
    (
        ["reward.reward_manager.name=prime", "reward.custom_reward_function.path=r.py"],
        {"reward.rewards[0].executor": "process"},
        [],
    ),
    (
        [
            "reward.reward_model.enable=True",
            "reward.reward_model.model.path=/m",
            "reward.reward_model.use_reward_loop=True",
        ],
        {"reward.reward_model.enable": True, "reward.reward_model.model_path": "/m"},
        ["reward.reward_model.use_reward_loop"],
    ),
]


@pytest.mark.parametrize("overrides,expected,dropped", MAPPINGS, ids=[m[0][-1] for m in MAPPINGS])
def test_mapping(overrides, expected, dropped):
    cfg = apply_overrides({}, overrides)
    new, report, _ = quiet_migrate(cfg)
    for key, value in expected.items():
        assert get_path(new, key) == value, (key, new)
    assert sorted(d["key"] for d in report.dropped) == sorted(dropped)
    assert legacy_keys(new) == []
    assert quiet_migrate(new)[0] == new


def test_custom_manager_is_kept_and_explained():
    new, report, _ = quiet_migrate({"reward_model": {"reward_manager": "my_manager"}})
    assert new["reward"]["manager"] == "my_manager"
    assert any("custom verl reward manager" in n for n in report.notes)


def test_old_top_level_string_reward_manager():
    new, report, _ = quiet_migrate({"reward_manager": "prime", "custom_reward_function": {"path": "r.py"}})
    assert new["reward"]["manager"] == "prime" and new["reward"]["rewards"][0]["executor"] == "process"


def test_dict_config_input_is_accepted_and_untouched():
    from omegaconf import OmegaConf

    cfg = OmegaConf.create({"custom_reward_function": {"path": "r.py"}, "trainer": {"x": "${oc.env:HOME}"}})
    new, _, _ = quiet_migrate(cfg)
    assert new["reward"]["rewards"] == [{"path": "r.py", "function": "compute_score"}]
    assert new["trainer"]["x"] == "${oc.env:HOME}"  # interpolations are kept, not resolved
    assert "custom_reward_function" in cfg


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
