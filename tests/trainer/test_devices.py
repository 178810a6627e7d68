"""The device and dtype choice (rewardhub_trainer.devices), for each capability torch can report.

The probes (torch's CPU feature flags, CUDA's presence, the matmul timing) are monkeypatched, so
every branch runs on this CPU-only machine; one test runs the real probes.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from rewardhub.errors import UsageError  # noqa: E402
from rewardhub_trainer import devices  # noqa: E402
from rewardhub_trainer.config import parse_config  # noqa: E402

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def cpu(monkeypatch):
    """Set the CPU's reported features: cpu(avx512_bf16=..., amx=..., slowdown=...)."""

    def make(*, avx512_bf16: bool = False, amx: bool = False, slowdown: float | None = None,
             name: str = "AVX2") -> list[str]:
        timed: list[str] = []
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
        monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: name)
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)

        def timing(device: str = "cpu", *args: object) -> float:
            timed.append(device)
            if slowdown is None:
                raise AssertionError("the matmul timing should not run here")
            return slowdown

        monkeypatch.setattr(devices, "bf16_slowdown", timing)
        return timed

    return make


def test_avx2_cpu_gets_fp32_without_timing(cpu):
    timed = cpu()
    c = devices.choose()
    assert (c.device, c.autocast, c.model_dtype, c.rollout_dtype) == ("cpu", "none", "float32", "float32")
    assert "no AVX-512 BF16 or AMX" in c.reason and c.warning is None
    assert timed == []  # the capability alone decides: no timing where bf16 is known to be emulated


@pytest.mark.parametrize("flags", [{"avx512_bf16": True}, {"amx": True}, {"avx512_bf16": True, "amx": True}])
def test_bf16_cpu_confirmed_by_timing_gets_bf16(cpu, flags):
    timed = cpu(**flags, slowdown=0.4, name="AVX512")
    c = devices.choose()
    assert (c.device, c.autocast, c.rollout_dtype) == ("cpu", "bfloat16", "bfloat16")
    assert c.model_dtype == "float32"  # master weights stay fp32
    assert timed == ["cpu"] and c.bf16_slowdown == 0.4
    assert ("AMX" in c.reason) == bool(flags.get("amx"))


def test_bf16_cpu_whose_timing_disagrees_gets_fp32(cpu):
    cpu(amx=True, slowdown=12.5, name="AVX512")
    c = devices.choose()
    assert (c.autocast, c.rollout_dtype) == ("none", "float32")
    assert "12.5x the fp32 time" in c.reason


@pytest.mark.parametrize("slowdown", [1.1, 1.6, 5.6])
def test_a_contended_timing_does_not_flip_a_native_bf16_cpu(cpu, slowdown):
    """What native bf16 measured while other processes started on the same cores: still bf16, so
    that two runs of one config choose the same dtypes."""
    cpu(avx512_bf16=True, slowdown=slowdown, name="AVX512")
    c = devices.choose()
    assert (c.autocast, c.rollout_dtype) == ("bfloat16", "bfloat16")


def test_no_confirmation_trusts_the_capability(cpu):
    cpu(avx512_bf16=True, slowdown=None)
    assert devices.choose(confirm=False).autocast == "bfloat16"


def test_forced_bf16_on_avx2_warns_with_the_measured_slowdown(cpu):
    timed = cpu(slowdown=28.4)
    c = devices.choose(autocast="bfloat16", rollout_dtype="bfloat16")
    assert (c.autocast, c.rollout_dtype, c.model_dtype) == ("bfloat16", "bfloat16", "float32")
    assert timed == ["cpu"]
    assert c.warning is not None and "\n" not in c.warning
    assert "28x slower than fp32" in c.warning
    assert "trainer.autocast=bfloat16" in c.warning and "rollout.dtype=bfloat16" in c.warning


def test_forced_fp32_is_kept_where_bf16_is_fast(cpu):
    cpu(avx512_bf16=True, slowdown=0.5)
    c = devices.choose(autocast="none", rollout_dtype="float32")
    assert (c.autocast, c.rollout_dtype, c.warning) == ("none", "float32", None)


@pytest.fixture
def gpu(monkeypatch):
    def make(bf16: bool) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Fake GPU")
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: bf16)

        def slowdown(device: str = "cpu", *a: object) -> float:
            if device != "cpu":
                pytest.fail("no timing on CUDA")
            return 0.5  # an explicit cpu on a host whose CPU reports bf16 is still timed

        monkeypatch.setattr(devices, "bf16_slowdown", slowdown)

    return make


def test_cuda_with_bf16(gpu):
    gpu(bf16=True)
    c = devices.choose()
    assert (c.device, c.autocast, c.rollout_dtype, c.model_dtype) == ("cuda", "bfloat16", "bfloat16", "float32")
    assert devices.choose("cpu").device == "cpu"  # an explicit cpu is kept even with a GPU


def test_cuda_without_bf16_gets_fp32(gpu):
    gpu(bf16=False)
    c = devices.choose()
    assert (c.device, c.autocast, c.rollout_dtype) == ("cuda", "none", "float32")


def test_cuda_asked_without_a_gpu_says_how_to_get_one(cpu):
    cpu()
    with pytest.raises(RuntimeError, match=r"trainer.device=cuda but this actor sees no GPU.*num_gpus"):
        devices.choose("cuda")


def test_real_probes_agree_with_torch():
    cap = devices.capability("cpu")
    assert cap.name == torch.backends.cpu.get_cpu_capability()
    assert cap.bf16 == (torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())
    threads = torch.get_num_threads()
    slowdown = devices.bf16_slowdown("cpu", 64, 1)
    assert slowdown > 0
    assert torch.get_num_threads() == threads  # timed on one thread, then put back
    c = devices.choose()
    assert c.autocast == ("bfloat16" if cap.bf16 and c.bf16_slowdown is not None
                          and c.bf16_slowdown < devices.BF16_TOO_SLOW else "none")


def _cfg(**sections):
    base = {"model": {"tiny": {"arch": "qwen2"}}, "reward": {"rewards": [{"name": "exact_match"}]}}
    base.update(sections)
    return base


def test_config_defaults_are_auto():
    cfg = parse_config(_cfg())
    assert (cfg.trainer.device, cfg.trainer.autocast, cfg.model.dtype, cfg.rollout.dtype) == ("auto",) * 4


@pytest.mark.parametrize("key,value", [("trainer.device", "tpu"), ("trainer.autocast", "fp16"),
                                       ("rollout.dtype", "half"), ("model.dtype", "float16")])
def test_config_rejects_unknown_choices(key, value):
    section, name = key.split(".")
    with pytest.raises(UsageError, match=rf"^{key}={value!r} is not valid\nallowed: auto, "):
        parse_config(_cfg(**{section: {name: value, **({"tiny": {"arch": "qwen2"}} if section == "model" else {})}}))


def test_the_choice_is_printed_once_with_the_warning_and_summarised(cpu, capsys):
    cpu(slowdown=30.0)
    learner = devices.choose(autocast="bfloat16", rollout_dtype="float32")
    roll = devices.choose(autocast="none", model_dtype="float32")
    infos = [{"role": "learner", "choice": learner, "gpu_ids": []},
             {"role": "rollouter", "choice": roll, "gpu_ids": ["1"]},
             {"role": "rollouter", "choice": roll, "gpu_ids": ["1"]},
             {"role": "rollouter", "choice": roll, "gpu_ids": [], "ignored_generation_settings": {"top_k": 5}},
             {"role": "reward_worker"}]
    devices.print_choices(infos)
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("devices: learner cpu (weights float32, autocast bfloat16): CPU AVX2")
    assert "rollouter cpu GPU 1 (weights float32)" in err[0] and err[0].count("rollouter cpu GPU 1") == 1
    assert err[1].startswith("WARNING: trainer.autocast=bfloat16 on CPU AVX2") and "30x slower" in err[1]
    assert err[2].startswith("note: the model folder's generation_config.json sets top_k=5; ignored")
    assert len(err) == 3
    summary = devices.devices_summary(infos)
    assert set(summary) == {"learner", "rollouter"}
    assert summary["learner"]["autocast"] == "bfloat16" and summary["learner"]["bf16_slowdown"] == 30.0
