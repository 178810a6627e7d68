"""The device and dtype choice (rewardhub_trainer.devices), for each capability torch can report.

The probes (torch's CPU feature flags, CUDA's presence and compute capability, the matmul timing)
are monkeypatched, so every branch runs on this CPU-only machine; one test runs the real probes.
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
def test_bf16_cpu_gets_bf16_from_its_capability(cpu, flags):
    cpu(**flags, slowdown=0.4, name="AVX512")
    c = devices.choose()
    assert (c.device, c.autocast, c.rollout_dtype) == ("cpu", "bfloat16", "bfloat16")
    assert c.model_dtype == "float32"  # master weights stay fp32
    assert c.warning is None
    assert ("AMX" in c.reason) == bool(flags.get("amx"))


@pytest.mark.parametrize("slowdown", [0.25, 1.1, 5.6, 12.5, 40.0])
def test_the_timing_never_changes_the_choice_only_warns(cpu, slowdown):
    """``auto`` is decided by the capability alone: whatever a (contended, or emulated) matmul timing
    measures, two runs of one config on one machine choose the same dtypes; a slow timing only warns."""
    cpu(avx512_bf16=True, slowdown=slowdown, name="AVX512")
    c = devices.choose()
    assert (c.autocast, c.rollout_dtype, c.model_dtype) == ("bfloat16", "bfloat16", "float32")
    if slowdown >= devices.BF16_TOO_SLOW:
        assert (
            c.warning is not None and "\n" not in c.warning and f"{slowdown:.1f}x the fp32 time" in c.warning
        )
        assert "trainer.autocast=none" in c.warning
    else:
        assert c.warning is None


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
    """A process that sees ``count`` CUDA GPUs of compute capability ``cc`` (torch's probes patched)."""

    def make(cc: tuple[int, int] = (8, 0), count: int = 1) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Fake GPU")
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: cc)
        # emulation counts: not asked
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

        def slowdown(device: str = "cpu", *a: object) -> float:
            if device != "cpu":
                pytest.fail("no timing on CUDA")
            return 0.5  # an explicit cpu on a host whose CPU reports bf16 is still timed

        monkeypatch.setattr(devices, "bf16_slowdown", slowdown)

    return make


def test_cuda_with_bf16(gpu):
    gpu(cc=(8, 0))
    c = devices.choose()
    assert (c.device, c.autocast, c.rollout_dtype, c.model_dtype) == (
        "cuda",
        "bfloat16",
        "bfloat16",
        "float32",
    )
    assert "compute capability 8.0" in c.reason
    assert devices.choose("cpu").device == "cpu"  # an explicit cpu is kept even with a GPU


@pytest.mark.parametrize("cc", [(7, 0), (7, 5), (6, 1)])
def test_cuda_below_compute_capability_8_gets_fp32(gpu, cc):
    """torch.cuda.is_bf16_supported() says yes to a V100/T4 (emulation): the compute capability decides."""
    gpu(cc=cc)
    c = devices.choose()
    assert (c.device, c.autocast, c.rollout_dtype) == ("cuda", "none", "float32")
    assert f"compute capability {cc[0]}.{cc[1]} < 8.0" in c.reason


def test_an_actor_given_no_gpu_sees_none_and_chooses_the_cpu(gpu, cpu, monkeypatch):
    """On a GPU node (torch sees 2 GPUs) an actor whose CUDA_VISIBLE_DEVICES is empty is on the CPU:
    ``auto`` never puts it on cuda:0 beside the GPU's owner, and ``cuda`` is refused."""
    cpu()
    gpu(cc=(9, 0), count=2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert devices.gpus_seen() == 0
    c = devices.choose()
    assert c.device == "cpu" and c.visible == "" and c.reason.startswith("no GPU given to this actor")
    assert c.as_dict()["cuda_visible_devices"] == ""
    with pytest.raises(RuntimeError, match="sees no GPU"):
        devices.choose("cuda")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert devices.choose().device == "cuda"


@pytest.mark.parametrize("seen,ok", [(0, False), (1, True), (2, False), (8, False)])
def test_a_cuda_learner_rank_must_see_exactly_one_gpu(seen, ok):
    why = devices.check_learner_gpus("cuda", seen)
    assert (why is None) == ok
    if not ok:
        assert f"sees {seen}" in why and "\n" not in why and "resources.learner.num_gpus: 1" in why
    assert devices.check_learner_gpus("cpu", seen) is None


def test_outside_an_actor_nothing_is_hidden(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert devices.hide_gpus_not_given() is False
    import os

    assert "CUDA_VISIBLE_DEVICES" not in os.environ


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
    assert c.autocast == ("bfloat16" if cap.bf16 else "none")  # the capability alone


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
        parse_config(
            _cfg(**{section: {name: value, **({"tiny": {"arch": "qwen2"}} if section == "model" else {})}})
        )


def test_the_choice_is_printed_once_with_the_warning_and_summarised(cpu, capsys):
    cpu(slowdown=30.0)
    learner = devices.choose(autocast="bfloat16", rollout_dtype="float32")
    roll = devices.choose(autocast="none", model_dtype="float32")
    infos = [
        {"role": "learner", "choice": learner, "gpu_ids": []},
        {"role": "rollouter", "choice": roll, "gpu_ids": ["1"]},
        {"role": "rollouter", "choice": roll, "gpu_ids": ["1"]},
        {"role": "rollouter", "choice": roll, "gpu_ids": [], "ignored_generation_settings": {"top_k": 5}},
        {"role": "reward_worker"},
    ]
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
