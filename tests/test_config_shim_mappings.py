"""The legacy shim, each mapping table-driven: every verl spelling moved or dropped as the table says;
custom and old-style reward managers."""

from __future__ import annotations

import pytest
from config_shim_helpers import get_path
from config_shim_helpers import quiet_migrate

from rewardhub.config.overrides import apply_overrides
from rewardhub.verl.shim import legacy_keys

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
