"""Device and dtype choice: decided by what the actor sees and what its hardware reports, nothing else.

The rules are the README's ("Devices and dtypes"). Each actor resolves the ``auto`` settings in its
own process. An actor Ray gave no GPU sees none: it starts with :data:`NO_GPU_ENV`, and :func:`choose`
hides the GPUs again (:func:`hide_gpus_not_given`) before torch looks; an empty ``CUDA_VISIBLE_DEVICES``
means CPU without asking torch (:func:`gpus_seen`); a CUDA learner rank sees exactly one GPU
(:func:`check_learner_gpus`). The dtype follows the reported capability alone; a short matmul timing
only warns (:data:`BF16_TOO_SLOW`), never changes the choice (two runs of one config once chose
different dtypes when it did).
"""

from __future__ import annotations

import functools
import os
import time
from dataclasses import dataclass
from typing import Any

__all__ = [
    "AUTOCASTS",
    "DEVICES",
    "DTYPES",
    "NO_GPU_ENV",
    "Capability",
    "Choice",
    "bf16_slowdown",
    "capability",
    "check_learner_gpus",
    "choose",
    "gpus_seen",
    "hide_gpus_not_given",
    "resolve_device",
]

DEVICES = ("auto", "cpu", "cuda")
AUTOCASTS = ("auto", "none", "bfloat16")
DTYPES = ("auto", "float32", "bfloat16")
BF16, FP32 = "bfloat16", "float32"

#: Ray's switch (``ray/_private/accelerators/accelerator.py``, Ray >= 2.48): with it Ray sets
#: ``CUDA_VISIBLE_DEVICES=""`` in an actor given no GPU; every actor of a run gets it in its runtime_env
NO_GPU_ENV: dict[str, Any] = {"env_vars": {"RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "1"}}


@dataclass(frozen=True)
class Capability:
    """What the device offers for bf16, as torch reports it."""

    device: str  #: cpu | cuda
    name: str  #: the CPU's torch capability (e.g. ``AVX2``, ``AVX512``) or the GPU's name
    bf16: bool  #: bf16 runs natively (AVX-512 BF16 / AMX on CPU; a GPU with bf16 support)
    detail: str  #: why, in words


@dataclass(frozen=True)
class Choice:
    """The resolved device and dtypes of one actor (plain values: recorded in ``summary.json``)."""

    device: str
    autocast: str  #: none | bfloat16
    model_dtype: str
    rollout_dtype: str
    reason: str
    #: bf16 matmul time / fp32 matmul time, when it was measured (for a warning only)
    bf16_slowdown: float | None = None
    warning: str | None = None  #: one line: bf16 forced where the hardware lacks it, or slow despite it
    #: ``CUDA_VISIBLE_DEVICES`` as the actor saw it when it chose (None: not set, every GPU of the node)
    visible: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"device": self.device, "autocast": self.autocast, "model_dtype": self.model_dtype,
                "rollout_dtype": self.rollout_dtype, "reason": self.reason,
                "bf16_slowdown": self.bf16_slowdown, "cuda_visible_devices": self.visible}


def _cpu_flag(name: str) -> bool:
    """One of torch's CPU feature probes (``torch.cpu._is_avx512_bf16_supported`` in torch 2.13)."""
    import torch
    import torch.cpu

    probe = getattr(torch.cpu, name, None) or getattr(getattr(torch._C, "_cpu", None), name, None)
    try:
        return bool(probe()) if callable(probe) else False
    except Exception:  # noqa: BLE001 - a torch without the probe: no
        return False


#: the first CUDA compute capability with bf16 tensor cores (Ampere)
CUDA_BF16_MAJOR = 8


def capability(device: str) -> Capability:
    """The bf16 capability of ``device`` (``cpu`` or ``cuda``) in this process, as the hardware reports it."""
    import torch

    if device == "cuda":
        name = torch.cuda.get_device_name(0)
        major, minor = torch.cuda.get_device_capability(0)
        ok = major >= CUDA_BF16_MAJOR
        return Capability("cuda", name, ok, f"CUDA {name} (compute capability {major}.{minor}"
                          + (", bf16)" if ok else f" < {CUDA_BF16_MAJOR}.0: no native bf16)"))
    name = str(torch.backends.cpu.get_cpu_capability())
    avx512_bf16 = _cpu_flag("_is_avx512_bf16_supported")
    amx = _cpu_flag("_is_amx_tile_supported")
    found = [n for n, ok in (("AVX-512 BF16", avx512_bf16), ("AMX", amx)) if ok]
    detail = " + ".join(found) if found else "no AVX-512 BF16 or AMX: bf16 is emulated"
    return Capability("cpu", name, bool(found), f"CPU {name}, {detail}")


def hide_gpus_not_given() -> bool:
    """In a Ray actor that Ray gave no GPU, set ``CUDA_VISIBLE_DEVICES=""`` (call it before torch uses CUDA).

    Ray >= 2.48 no longer does it unless :data:`NO_GPU_ENV` is set; this makes it true whatever the
    Ray version or the cluster's settings. Returns whether it changed the variable. Outside an actor
    (the driver, a test) nothing changes.
    """
    try:
        import ray

        if not ray.is_initialized():
            return False
        context = ray.get_runtime_context()
        if context.get_actor_id() is None or context.get_accelerator_ids().get("GPU"):
            return False
    except Exception:  # noqa: BLE001 - not in Ray
        return False
    if os.environ.get("CUDA_VISIBLE_DEVICES") == "":
        return False
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    return True


def gpus_seen() -> int:
    """The CUDA GPUs this process may use: 0 when ``CUDA_VISIBLE_DEVICES`` is empty (the actor was given
    none; torch is not asked), else torch's count (0 without CUDA)."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", "unset").strip() == "":
        return 0
    import torch

    return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0


def resolve_device(requested: str) -> str:
    """``auto`` -> ``cuda`` when this process sees a GPU (:func:`gpus_seen`), else ``cpu``; ``cuda`` without
    one raises."""
    if requested == "cpu":
        return "cpu"
    seen = gpus_seen()
    if requested == "cuda" and not seen:
        raise RuntimeError("trainer.device=cuda but this actor sees no GPU (Ray gave it none, or torch "
                           "has no CUDA); give the role GPUs with resources.<role>.num_gpus, or use "
                           "trainer.device=auto")
    return "cuda" if seen else "cpu"


def check_learner_gpus(device: str, seen: int | None = None) -> str | None:
    """Why a learner rank on ``device`` cannot run (None: it can): a CUDA rank must see exactly one GPU."""
    if device != "cuda":
        return None
    seen = gpus_seen() if seen is None else seen
    if seen == 1:
        return None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return (
        f"a CUDA learner rank must see exactly one GPU; this one sees {seen} (CUDA_VISIBLE_DEVICES="
        f"{visible!r}): set resources.learner.num_gpus: 1 (one GPU per rank; trainer.num_learners for more "
        "GPUs), and do not set RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"
    )


#: a bf16/fp32 matmul time ratio from which a CPU that reports native bf16 gets a warning (native
#: bf16 measures about 0.25, emulated 20-30; under contention native once measured 5.6). Never
#: changes the choice: only the capability does
BF16_TOO_SLOW = 8.0


@functools.lru_cache(maxsize=4)
def bf16_slowdown(device: str = "cpu", size: int = 192, repeats: int = 7) -> float:
    """bf16 time / fp32 time of a ``size x size @ size x 4size`` matmul, best of ``repeats`` each.

    The two are timed in turn (bf16, fp32, bf16, ...), so that another process taking the cores for
    a moment slows both alike. About 0.2 s on an AVX2 core where bf16 is emulated, a few
    milliseconds where it is native. Used for warnings only.
    """
    import torch

    def operands(dtype: Any) -> tuple[Any, Any]:
        a = torch.randn(size, size, dtype=dtype, device=device)
        b = torch.randn(size, 4 * size, dtype=dtype, device=device)
        a @ b  # warm-up (kernel choice, packing)
        return a, b

    def once(a: Any, b: Any) -> float:
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        a @ b
        if device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t0

    threads = torch.get_num_threads()
    if device == "cpu":  # one core's ratio: a matmul on two threads waits for the slower one
        torch.set_num_threads(1)
    try:
        half, full = operands(torch.bfloat16), operands(torch.float32)
        best_half = best_full = float("inf")
        for _ in range(repeats):
            best_half = min(best_half, once(*half))
            best_full = min(best_full, once(*full))
    finally:
        torch.set_num_threads(threads)
    return best_half / max(best_full, 1e-9)


def choose(device: str = "auto", autocast: str = "auto", model_dtype: str = "auto",
           rollout_dtype: str = "auto", *, confirm: bool = True) -> Choice:
    """Resolve the device and every ``auto`` dtype for this process, from the capability alone (in a Ray
    actor given no GPU, first hide the node's GPUs: :func:`hide_gpus_not_given`).

    :param confirm: on a CPU whose capability says bf16, time a small matmul and *warn* (the choice
        stays bf16) when bf16 is :data:`BF16_TOO_SLOW` times slower there.
    """
    hide_gpus_not_given()  # in a Ray actor given no GPU: CUDA_VISIBLE_DEVICES="" before torch looks
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    dev = resolve_device(device)
    cap = capability(dev)
    fast = cap.bf16
    reason = cap.detail
    if visible is not None and visible.strip() == "" and device != "cpu":
        reason = f"no GPU given to this actor (CUDA_VISIBLE_DEVICES=''), {reason}"
    bf16_or_fp32 = BF16 if fast else FP32
    out = {
        "autocast": ("bfloat16" if fast else "none") if autocast == "auto" else autocast,
        "model_dtype": FP32 if model_dtype == "auto" else model_dtype,
        "rollout_dtype": bf16_or_fp32 if rollout_dtype == "auto" else rollout_dtype,
    }
    forced = [key for key, value in (("trainer.autocast", autocast), ("model.dtype", model_dtype),
                                     ("rollout.dtype", rollout_dtype)) if value == BF16]
    slowdown: float | None = None
    warning = None
    uses_bf16 = BF16 in (out["autocast"], out["rollout_dtype"], out["model_dtype"])
    if forced and not fast:
        slowdown = bf16_slowdown(dev)
        if slowdown > 1.5:
            warning = (f"{', '.join(f'{k}=bfloat16' for k in forced)} on {cap.detail} ({cap.name}): a bf16 "
                       f"matmul measured {slowdown:.0f}x slower than fp32 here; set them to auto (fp32 "
                       "on this machine)")
    elif fast and uses_bf16 and dev == "cpu" and confirm:
        slowdown = bf16_slowdown(dev)
        if slowdown >= BF16_TOO_SLOW:
            warning = (f"{cap.detail} ({cap.name}) reports native bf16, but a bf16 matmul measured "
                       f"{slowdown:.1f}x the fp32 time here (kept: the capability decides); if it stays "
                       "slow set trainer.autocast=none and rollout.dtype=float32")
    return Choice(device=dev, reason=reason, bf16_slowdown=slowdown, warning=warning, visible=visible, **out)


def print_choices(infos: list[dict[str, Any]]) -> None:
    """Print, once at the start of a run, the device and dtypes each kind of actor chose, and why."""
    import sys

    lines: dict[str, str] = {}
    warnings: dict[str, None] = {}
    for info in infos:
        c = info.get("choice")
        if isinstance(c, Choice):
            what = f"{c.model_dtype}, autocast {c.autocast}" if info["role"] == "learner" else c.rollout_dtype
            gpus = f" GPU {','.join(info['gpu_ids'])}" if info.get("gpu_ids") else ""
            lines.setdefault(f"{info['role']} {c.device}{gpus} (weights {what})", c.reason)
            if c.warning:
                warnings[c.warning] = None
    if lines:
        print("devices: " + "; ".join(f"{k}: {v}" for k, v in lines.items()), file=sys.stderr)
    for w in warnings:
        print(f"WARNING: {w}", file=sys.stderr)
    ignored = next(
        (i["ignored_generation_settings"] for i in infos if i.get("ignored_generation_settings")), None
    )
    if ignored:
        print("note: the model folder's generation_config.json sets "
              + ", ".join(f"{k}={v}" for k, v in sorted(ignored.items()))
              + "; ignored: rollouts sample with the rollout.* settings only", file=sys.stderr)


def devices_summary(infos: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``summary.json``'s ``devices``: the choice of each role (the first actor of the role)."""
    out: dict[str, dict[str, Any]] = {}
    for info in infos:
        if isinstance(info.get("choice"), Choice):
            out.setdefault(info["role"], info["choice"].as_dict())
    return out
