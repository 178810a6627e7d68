"""Device and dtype choice: bf16 only where the hardware makes it fast.

``trainer.device``, ``trainer.autocast``, ``model.dtype`` and ``rollout.dtype`` default to ``auto``.
Each actor resolves them in its own process (a learner on a GPU node and a rollouter on a CPU node
choose differently): ``auto`` is CUDA when the actor sees a GPU (Ray sets ``CUDA_VISIBLE_DEVICES``
to the GPUs it gave the actor), else the CPU; bf16 is chosen on CUDA devices that support it and on
CPUs whose torch build reports AVX-512 BF16 or AMX, unless a short matmul timing finds bf16 at least
:data:`BF16_TOO_SLOW` times slower than fp32 there (emulated despite the flag). Everywhere else bf16
is emulated: on an AVX2 CPU a bf16 matmul is ~30x slower than fp32, so ``auto`` means fp32 there,
and a forced ``bfloat16`` gets a one-line warning with the measured slowdown.

``model.dtype`` is the learner's master weights: ``auto`` keeps them in fp32 (the optimizer needs
the precision) and lets ``trainer.autocast`` run the matmuls in bf16 where that is fast.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Any

__all__ = ["AUTOCASTS", "DEVICES", "DTYPES", "Capability", "Choice", "bf16_slowdown", "capability",
           "choose", "resolve_device"]

DEVICES = ("auto", "cpu", "cuda")
AUTOCASTS = ("auto", "none", "bfloat16")
DTYPES = ("auto", "float32", "bfloat16")
BF16, FP32 = "bfloat16", "float32"


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
    #: bf16 matmul time / fp32 matmul time, when it was measured (a capability said bf16, or bf16 was forced)
    bf16_slowdown: float | None = None
    warning: str | None = None  #: one line, when bf16 was forced where it is slow

    def as_dict(self) -> dict[str, Any]:
        return {"device": self.device, "autocast": self.autocast, "model_dtype": self.model_dtype,
                "rollout_dtype": self.rollout_dtype, "reason": self.reason,
                "bf16_slowdown": self.bf16_slowdown}


def _cpu_flag(name: str) -> bool:
    """One of torch's CPU feature probes (``torch.cpu._is_avx512_bf16_supported`` in torch 2.13)."""
    import torch
    import torch.cpu

    probe = getattr(torch.cpu, name, None) or getattr(getattr(torch._C, "_cpu", None), name, None)
    try:
        return bool(probe()) if callable(probe) else False
    except Exception:  # noqa: BLE001 - a torch without the probe: no
        return False


def capability(device: str) -> Capability:
    """The bf16 capability of ``device`` (``cpu`` or ``cuda``) in this process."""
    import torch

    if device == "cuda":
        name = torch.cuda.get_device_name(0)
        ok = bool(torch.cuda.is_bf16_supported())
        return Capability("cuda", name, ok, "CUDA with bf16" if ok else "CUDA without bf16 support")
    name = str(torch.backends.cpu.get_cpu_capability())
    avx512_bf16 = _cpu_flag("_is_avx512_bf16_supported")
    amx = _cpu_flag("_is_amx_tile_supported")
    found = [n for n, ok in (("AVX-512 BF16", avx512_bf16), ("AMX", amx)) if ok]
    detail = " + ".join(found) if found else "no AVX-512 BF16 or AMX: bf16 is emulated"
    return Capability("cpu", name, bool(found), f"CPU {name}, {detail}")


def resolve_device(requested: str) -> str:
    """``auto`` -> ``cuda`` when this process sees a GPU, else ``cpu``; ``cuda`` without one raises."""
    import torch

    if requested == "cpu":
        return "cpu"
    available = torch.cuda.is_available()
    if requested == "cuda" and not available:
        raise RuntimeError("trainer.device=cuda but this actor sees no GPU (Ray gave it none, or torch "
                           "has no CUDA); give the role GPUs with resources.<role>.num_gpus, or use "
                           "trainer.device=auto")
    return "cuda" if available else "cpu"


#: a bf16/fp32 matmul time ratio at which a CPU that reports native bf16 gets fp32 after all. Native
#: bf16 measures about 0.25 and emulated bf16 20-30; a low threshold lets contention decide: with
#: other processes starting on the same 2 cores, native bf16 measured 1.1x, 1.6x and once 5.6x (timed
#: on two threads then), and two runs of one config chose different dtypes (different numbers from
#: step 1). So: a threshold far from both, and the timing runs on one thread
BF16_TOO_SLOW = 8.0


@functools.lru_cache(maxsize=4)
def bf16_slowdown(device: str = "cpu", size: int = 192, repeats: int = 7) -> float:
    """bf16 time / fp32 time of a ``size x size @ size x 4size`` matmul, best of ``repeats`` each.

    The two are timed in turn (bf16, fp32, bf16, ...), so that another process taking the cores for
    a moment (a second actor starting on the same node) slows both alike instead of one: measured
    apart, such a moment once made native bf16 look 1.6x slower than fp32 and flipped the choice.
    About 0.2 s on an AVX2 core where bf16 is emulated, a few milliseconds where it is native.
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
    if device == "cpu":  # one core's ratio: a matmul on two threads waits for the slower one, so
        torch.set_num_threads(1)  # another process preempting either skews it
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
    """Resolve the device and every ``auto`` dtype for this process.

    :param confirm: on a CPU whose capability says bf16, time a small matmul and keep fp32 if bf16
        is :data:`BF16_TOO_SLOW` times slower there (cheap: a few milliseconds when it is native).
    """
    dev = resolve_device(device)
    cap = capability(dev)
    slowdown: float | None = None
    fast = cap.bf16
    reason = cap.detail
    if fast and dev == "cpu" and confirm:
        slowdown = bf16_slowdown(dev)
        if slowdown >= BF16_TOO_SLOW:
            fast = False
            reason += f", but a bf16 matmul measured {slowdown:.1f}x the fp32 time: fp32"
    bf16_or_fp32 = BF16 if fast else FP32
    out = {
        "autocast": ("bfloat16" if fast else "none") if autocast == "auto" else autocast,
        "model_dtype": FP32 if model_dtype == "auto" else model_dtype,
        "rollout_dtype": bf16_or_fp32 if rollout_dtype == "auto" else rollout_dtype,
    }
    forced = [key for key, value in (("trainer.autocast", autocast), ("model.dtype", model_dtype),
                                     ("rollout.dtype", rollout_dtype)) if value == BF16]
    warning = None
    if forced and not fast:
        if slowdown is None:
            slowdown = bf16_slowdown(dev)
        if slowdown > 1.5:
            warning = (f"{', '.join(f'{k}=bfloat16' for k in forced)} on {cap.detail} ({cap.name}): a bf16 "
                       f"matmul measured {slowdown:.0f}x slower than fp32 here; set them to auto (fp32 "
                       "on this machine)")
    return Choice(device=dev, reason=reason, bf16_slowdown=slowdown, warning=warning, **out)


def _line(info: dict[str, Any]) -> str:
    c: Choice = info["choice"]
    if info["role"] == "learner":
        what = f"weights {c.model_dtype}, autocast {c.autocast}"
    else:
        what = f"weights {c.rollout_dtype}"
    gpus = f" GPU {','.join(info['gpu_ids'])}" if info.get("gpu_ids") else ""
    return f"{info['role']} {c.device}{gpus} ({what})"


def print_choices(infos: list[dict[str, Any]]) -> None:
    """Print, once at the start of a run, the device and dtypes each kind of actor chose, and why."""
    import sys

    lines: dict[str, str] = {}
    warnings: dict[str, None] = {}
    for info in infos:
        if isinstance(info.get("choice"), Choice):
            lines.setdefault(_line(info), info["choice"].reason)
            if info["choice"].warning:
                warnings[info["choice"].warning] = None
    if lines:
        print("devices: " + "; ".join(f"{k}: {v}" for k, v in lines.items()), file=sys.stderr)
    for w in warnings:
        print(f"WARNING: {w}", file=sys.stderr)
    ignored = next((i["ignored_generation_settings"] for i in infos if i.get("ignored_generation_settings")), None)
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
