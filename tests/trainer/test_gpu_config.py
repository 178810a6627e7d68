"""GPU settings in the config (issue 27 §1): ``trainer.device`` through the verl key map, the vLLM keys
``rollout.max_model_len / gpu_memory_utilization / enforce_eager / tensor_parallel_size`` (and verl's
spellings) reaching the engine's constructor, the GPUs a tensor-parallel rollouter asks for, the
evaluator's placement, and a learner rank that does not see exactly one GPU refused in one line."""

from __future__ import annotations

import warnings

import pytest

from rewardhub.config import load_config
from rewardhub.config.loader import read_and_migrate
from rewardhub.errors import RewardhubDeprecationWarning
from rewardhub.errors import UsageError
from rewardhub_trainer.config import parse_config
from rewardhub_trainer.placement import bundles
from rewardhub_trainer.placement_doctor import doctor_lines
from rewardhub_trainer.placement_doctor import plan_report

REWARD = "reward.rewards=[{name: exact_match}]"
TINY = "model.tiny.arch=qwen2"


def _migrated(overrides: list[str]):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RewardhubDeprecationWarning)  # each verl key warns once
        return read_and_migrate(None, overrides)


def _parsed(*overrides: str):
    return parse_config(load_config(None, [TINY, REWARD, *overrides]))


def test_trainer_device_is_kept_by_the_verl_key_map():
    cfg, report = _migrated(["trainer.device=cuda", REWARD])
    assert cfg["trainer"] == {"device": "cuda"}
    assert not [d for d in report.dropped if d["key"] == "trainer.device"]
    parsed = _parsed("trainer.device=cpu", "resources.learner.num_gpus=1")
    assert parsed.trainer.device == "cpu"
    assert _parsed("trainer.device=cuda", "resources.learner.num_gpus=1",
                   "resources.rollouter.num_gpus=1").trainer.device == "cuda"


def test_vllm_keys_and_their_verl_spellings():
    cfg, report = _migrated(
        [
            "actor_rollout_ref.rollout.max_model_len=1024",
            "actor_rollout_ref.rollout.gpu_memory_utilization=0.7",
            "actor_rollout_ref.rollout.enforce_eager=False",
            "actor_rollout_ref.rollout.tensor_model_parallel_size=2",
            "actor_rollout_ref.rollout.name=vllm",
            REWARD,
        ]
    )
    assert cfg["rollout"] == {"max_model_len": 1024, "gpu_memory_utilization": 0.7, "enforce_eager": False,
                              "tensor_parallel_size": 2, "engine": "vllm"}
    assert cfg["resources"]["rollouter"] == {"num_gpus": 2}  # each engine's GPUs, asked by each rollouter
    moved = {m["from"]: m["to"] for m in report.moved}
    assert moved["actor_rollout_ref.rollout.max_model_len"] == "rollout.max_model_len"
    assert moved["actor_rollout_ref.rollout.gpu_memory_utilization"] == "rollout.gpu_memory_utilization"
    assert moved["actor_rollout_ref.rollout.enforce_eager"] == "rollout.enforce_eager"
    with pytest.raises(UsageError, match=r"sets rollout.tensor_parallel_size, which the config sets to 4"):
        _migrated(["actor_rollout_ref.rollout.tensor_model_parallel_size=2",
                                "rollout.tensor_parallel_size=4", REWARD])
    parsed = _parsed("rollout.engine=vllm", "rollout.max_model_len=512", "rollout.gpu_memory_utilization=0.8",
                     "rollout.enforce_eager=false")
    r = parsed.rollout
    assert (r.max_model_len, r.gpu_memory_utilization, r.enforce_eager, r.tensor_parallel_size) == (
        512,
        0.8,
        False,
        1,
    )


@pytest.mark.parametrize(
    "override,message",
    [
        ("rollout.gpu_memory_utilization=0", r"^rollout.gpu_memory_utilization=0(\.0)? is not valid"),
        ("rollout.gpu_memory_utilization=1.5", r"^rollout.gpu_memory_utilization=1.5 is not valid"),
        ("rollout.max_model_len=-1", r"^rollout.max_model_len=-1 is not valid"),
        ("rollout.tensor_parallel_size=0", r"^rollout.tensor_parallel_size=0 is not valid"),
        (
            "rollout.tensor_parallel_size=2",
            r"^rollout.tensor_parallel_size=2 is not valid: only the vLLM engine",
        ),
        (
            "resources.learner.num_gpus=2",
            r"^resources.learner.num_gpus=2.0 is not valid: a learner rank uses exactly "
            r"one GPU\nset it to 1 and trainer.num_learners",
        ),
    ],
)
def test_bad_gpu_values_fail_before_ray(override, message):
    with pytest.raises(UsageError, match=message):
        _parsed(override)


def test_tensor_parallel_rollouters_ask_for_that_many_gpus():
    parsed = _parsed("rollout.engine=vllm", "rollout.tensor_parallel_size=2")
    assert parsed.resources.rollouter.num_gpus == 2
    items = bundles(parsed.resources, num_rollouters=2, evaluators=1)
    assert [(b.role, dict(b.needs)) for b in items] == [("rollouter", {"GPU": 2.0})] * 2 + [
        ("evaluator", {"GPU": 2.0})
    ]
    assert _parsed("rollout.engine=vllm", "rollout.tensor_parallel_size=2",
                   "resources.rollouter.num_gpus=2").resources.rollouter.num_gpus == 2
    doctor = doctor_lines(
        load_config(None, [REWARD, "rollout.engine=vllm", "rollout.tensor_parallel_size=2"]),
        [{"node_id": "a" * 40, "ip": "10.0.0.1", "resources": {"CPU": 4.0, "GPU": 2.0}}],
    )
    assert f"  rollouter 0: GPU=2 on node {'a' * 12} (pack)" in doctor
    with pytest.raises(
        UsageError,
        match=r"^resources.rollouter.num_gpus=1.0 is not valid: rollout.tensor_parallel_"
        r"size=2 needs 2 GPUs per rollouter\nset it to 2",
    ):
        _parsed("rollout.engine=vllm", "rollout.tensor_parallel_size=2", "resources.rollouter.num_gpus=1")


def test_the_evaluator_is_placed_like_a_rollouter_or_by_its_own_entry():
    res = _parsed("resources.rollouter.num_gpus=1").resources
    assert res.evaluator is None and "evaluator" not in res.to_dict()
    assert [b.name for b in bundles(res, 2, evaluators=1)] == ["rollouter 0", "rollouter 1", "evaluator 0"]
    # no validation set: no evaluator
    assert [b.name for b in bundles(res, 2)] == ["rollouter 0", "rollouter 1"]
    own = _parsed("resources.rollouter.num_gpus=1", "resources.evaluator.num_cpus=1").resources
    assert own.to_dict()["evaluator"] == {"num_cpus": 1.0, "num_gpus": 0.0}
    assert [(b.name, dict(b.needs)) for b in bundles(own, 1, evaluators=1)][-1] == (
        "evaluator 0",
        {"CPU": 1.0},
    )
    nodes = [{"NodeID": "a" * 40, "Alive": True, "Resources": {"CPU": 4.0, "GPU": 2.0}}]
    # 2 GPUs: the learner's and one rollouter's; the evaluator's would be a third
    lines = plan_report(
        _parsed("resources.rollouter.num_gpus=1", "resources.learner.num_gpus=1").resources,
        1,
        nodes,
        evaluators=1,
    )
    assert lines == [
        "trainer pools: PROBLEM: resources: the cluster cannot place the run (pack): 3 GPU asked in "
        "all, the cluster has 2"
    ]
    doctor = doctor_lines(
        load_config(None, [REWARD, "resources.rollouter.num_gpus=1", "data.val_files=v.jsonl"]),
        [{"node_id": "a" * 40, "ip": "10.0.0.1", "resources": {"CPU": 4.0, "GPU": 2.0}}],
    )
    assert f"  evaluator 0: GPU=1 on node {'a' * 12} (pack)" in doctor


def test_verl_gpu_sizing_leaves_the_evaluator_its_gpus():
    cfg, report = _migrated(["trainer.n_gpus_per_node=8", "data.val_files=v.parquet", REWARD])
    assert cfg["trainer"]["num_rollouters"] == 6  # 8 GPUs: the learner's, the evaluator's, 6 rollouters
    assert any("the evaluator (data.val_files) 1" in n for n in report.notes)
    cfg, _ = _migrated(["trainer.n_gpus_per_node=8", REWARD])
    assert cfg["trainer"]["num_rollouters"] == 7


def test_the_vllm_settings_reach_the_engine_constructor(monkeypatch):
    from rewardhub_trainer import engine
    from rewardhub_trainer import vllm_engine

    got = {}

    class Recorder:
        def __init__(self, model_path, **kwargs):
            got.update(kwargs, model_path=model_path)

    monkeypatch.setattr(vllm_engine, "VLLMEngine", Recorder)
    monkeypatch.setattr(engine, "check_engine", lambda name: None)
    rollout = {"engine": "vllm", "max_model_len": 384, "gpu_memory_utilization": 0.6, "enforce_eager": False,
               "tensor_parallel_size": 2, "n": 4}
    engine.make_engine("vllm", "/m", dtype="bfloat16", rollout=rollout)
    assert got == {
        "model_path": "/m",
        "dtype": "bfloat16",
        "max_model_len": 384,
        "gpu_memory_utilization": 0.6,
        "enforce_eager": False,
        "tensor_parallel_size": 2,
    }
    got.clear()
    engine.make_engine("vllm", "/m", rollout={**rollout, "max_model_len": 0})  # 0: the engine's default
    assert "max_model_len" not in got


def test_llm_arguments_carry_the_settings():
    from rewardhub_trainer.vllm_engine import EXTENSION
    from rewardhub_trainer.vllm_engine import llm_arguments

    gpu = llm_arguments(
        "/m",
        {"max_position_embeddings": 8192},
        on_cpu=False,
        dtype="bfloat16",
        max_model_len=4096,
        gpu_memory_utilization=0.85,
        enforce_eager=False,
        tensor_parallel_size=2,
    )
    assert {
        k: gpu[k]
        for k in (
            "max_model_len",
            "gpu_memory_utilization",
            "enforce_eager",
            "tensor_parallel_size",
            "distributed_executor_backend",
            "dtype",
            "worker_extension_cls",
        )
    } == {
        "max_model_len": 4096,
        "gpu_memory_utilization": 0.85,
        "enforce_eager": False,
        "tensor_parallel_size": 2,
        "distributed_executor_backend": "mp",
        "dtype": "bfloat16",
        "worker_extension_cls": EXTENSION,
    }
    default = llm_arguments("/m", {"max_position_embeddings": 8192}, on_cpu=False)
    assert (
        default["max_model_len"],
        default["tensor_parallel_size"],
        default["distributed_executor_backend"],
    ) == (2048, 1, "uni")
    cpu = llm_arguments("/m", {}, on_cpu=True, max_model_len=256, kv_cache_bytes=2**20)
    assert "gpu_memory_utilization" not in cpu and cpu["kv_cache_memory_bytes"] == 2**20


def test_a_learner_rank_that_sees_two_gpus_is_refused_in_one_line(monkeypatch):
    """The rank reports the reason instead of training on cuda:0 beside another rank; the driver stops the
    run with it (RunAborted: one ERROR line naming the learner)."""
    torch = pytest.importorskip("torch")
    from rewardhub_trainer import devices
    from rewardhub_trainer.actors import Learner
    from rewardhub_trainer.config import LearnerSettings
    from rewardhub_trainer.faults import RunAborted
    from rewardhub_trainer.fleet import check_infos

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")  # e.g. RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Fake GPU")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    learner = Learner("/no-model-needed", LearnerSettings(device="auto", autocast="auto", dtype="auto"))
    info = learner.info()
    assert info["role"] == "learner" and "sees 2" in info["error"] and "\n" not in info["error"]
    assert devices.check_learner_gpus("cuda", 1) is None
    with pytest.raises(
        RunAborted,
        match=r"^learner on .*: a CUDA learner rank must see exactly one GPU; this one "
        r"sees 2 \(CUDA_VISIBLE_DEVICES='0,1'\)",
    ):
        check_infos([info])


def test_gpu_check_runs_its_cpu_side_checks_here():
    """bench/gpu_check.py stays current: its CPU-side checks import and pass on this CPU-only machine."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "bench" / "gpu_check.py"
    spec = importlib.util.spec_from_file_location("gpu_check", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    checks = module.cpu_checks()
    assert [name for name, ok, _ in checks] == ["dtype auto is deterministic", "no GPU given -> none seen",
                                                "GPU config keys"]
    assert all(ok for _, ok, _ in checks), checks
