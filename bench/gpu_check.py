"""GPU check: the demo config (examples/arithmetic.yaml) with a CUDA learner and vLLM rollouts.

    python bench/gpu_check.py [--steps 10] [--config examples/arithmetic.yaml] [KEY=VALUE ...]

Where a GPU is present (``torch.cuda.is_available()``), trains the demo config once in ``sync``
mode (the baseline) and once in ``fully_async`` mode. GPUs are asked through ``resources:``: with
two or more GPUs the learner and the rollouter get one each, with one GPU they share it (0.5 each;
vLLM takes ``gpu_memory_utilization`` 0.5 of it). ``trainer.device=auto`` then puts the learner on
CUDA (bf16 autocast where the GPU supports it). Rollouts use vLLM when it imports, else the
transformers engine on the GPU (said in the output). Prints one line per figure and mode:

- rollout tokens/s: response tokens generated per second of the rollouter's generate calls,
- learner step time: the median ``train_s`` of a GRPO step,
- throughput (samples trained per second, first to last step), and the fully-async vs sync ratio,
- peak GPU memory used during the run (``nvidia-smi``, sampled every 0.5 s), device and dtypes
  each role chose, exact accounting and weight syncs.

On a machine without a GPU it says so and exits 0 (the CPU paths are covered by the tests). The
figures are printed as one JSON object on the last line as well (a GPU session pastes them into its note).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _gpu() -> str | None:
    """The GPU's name, or None without one (torch missing counts as none)."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    return str(torch.cuda.get_device_name(0))


def _gpu_count() -> int:
    import torch

    return int(torch.cuda.device_count())


class _GpuMemory:
    """Peak memory used on the GPUs while the block runs, from nvidia-smi (None without it)."""

    def __enter__(self) -> "_GpuMemory":
        import shutil
        import threading

        self.peak_mib: int | None = None
        self._stop = threading.Event()
        self._smi = shutil.which("nvidia-smi")
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def _poll(self) -> None:
        import subprocess

        while self._smi and not self._stop.wait(0.5):
            try:
                out = subprocess.run([self._smi, "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                                     capture_output=True, text=True, timeout=10).stdout
                used = sum(int(x) for x in out.split() if x.strip().isdigit())
            except (OSError, subprocess.SubprocessError):
                return
            self.peak_mib = max(self.peak_mib or 0, used)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=15)


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line]


def _figures(summary: dict, rows: list[dict], samples_per_step: int) -> dict:
    gen_s = sum(r["time/gen_s"] for r in rows if r.get("time/gen_s"))
    tokens = sum(r["response_len/mean"] * samples_per_step for r in rows if "response_len/mean" in r)
    train_s = [r["train_s"] for r in rows if r.get("train_s")]
    return {
        "rollout_tokens_per_s": tokens / gen_s if gen_s else float("nan"),
        "learner_step_s": statistics.median(train_s) if train_s else float("nan"),
        "throughput_samples_per_s": summary["throughput_samples_per_s"],
        "wall_s": summary["wall_s"],
        "steps": summary["steps"],
        "weight_syncs": summary["weight_syncs"],
        "accounting_exact": summary["accounting_exact"],
        "samples_dropped_stale": summary["samples_dropped_stale"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--config", default=str(ROOT / "examples" / "arithmetic.yaml"))
    parser.add_argument("--allow-cpu", action="store_true",
                        help="run on the CPU vLLM backend when there is no GPU (checks this script)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    args = parser.parse_args(argv)

    gpu = _gpu() or ("CPU (--allow-cpu)" if args.allow_cpu else None)
    if gpu is None:
        print("gpu_check: no GPU on this machine (torch.cuda.is_available() is False); the vLLM GPU "
              "check did not run. The CPU vLLM engine is tested by tests/vllm_engine.")
        return 0
    from rewardhub_trainer.vllm_engine import vllm_available

    missing = vllm_available()
    engine = "vllm" if not missing else "transformers"
    if missing:
        print(f"gpu_check: {missing}; rollouts use the transformers engine on the GPU instead "
              "(VLLM_PACKAGE=vllm bash scripts/install-vllm.sh VENV for vLLM)")
    gpus = _gpu_count()
    share = 1 if gpus >= 2 else 0.5
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import yaml

    from rewardhub_trainer.cli import train

    cfg = yaml.safe_load(Path(args.config).read_text())
    samples_per_step = int(cfg["rollout"].get("n", 4)) * int(cfg["rollout"].get("prompts_per_step", 4))
    common = [f"rollout.engine={engine}", f"trainer.total_steps={args.steps}", "trainer.checkpoint_every=0",
              f"++resources.learner.num_gpus={share}", f"++resources.rollouter.num_gpus={share}", *args.overrides]
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        for mode in ("sync", "fully_async"):
            out = Path(tmp) / mode
            t0 = time.perf_counter()
            with _GpuMemory() as memory:
                summary = train(args.config, [*common, f"trainer.mode={mode}"], output=str(out))
            results[mode] = _figures(summary, _rows(out), samples_per_step)
            results[mode]["run_s"] = time.perf_counter() - t0
            results[mode]["peak_gpu_memory_mib"] = memory.peak_mib
            results[mode]["devices"] = {role: f"{d['device']} autocast={d['autocast']} rollout={d['rollout_dtype']}"
                                        for role, d in summary.get("devices", {}).items()}
            results[mode]["gpu_ids"] = {f"{w['role']} {w['pid']}": w.get("gpu_ids") for w in summary["workers"]
                                        if w["role"] in ("learner", "rollouter")}
    sync, fully = results["sync"], results["fully_async"]
    ratio = fully["throughput_samples_per_s"] / sync["throughput_samples_per_s"]
    print(f"gpu_check on {gpu} ({gpus} GPU(s), {share} per role): {args.config} with rollout.engine={engine}, "
          f"{args.steps} steps per mode")
    for mode, r in results.items():
        print(f"  {mode:11s} rollout tokens/s {r['rollout_tokens_per_s']:.1f}")
        print(f"  {mode:11s} learner step s {r['learner_step_s']:.3f}")
        print(f"  {mode:11s} throughput samples/s {r['throughput_samples_per_s']:.2f}")
        print(f"  {mode:11s} peak GPU memory MiB {r['peak_gpu_memory_mib']}")
        print(f"  {mode:11s} devices {r['devices']}; GPU ids {r['gpu_ids']}")
        print(f"  {mode:11s} weight syncs {r['weight_syncs']}, accounting exact {r['accounting_exact']}")
    print(f"  fully_async vs sync throughput: {ratio:.2f}x (goal >= 1.3x)")
    print(json.dumps({"gpu": gpu, "ratio_fully_async_vs_sync": ratio, **results}, sort_keys=True))
    return 0 if sync["accounting_exact"] and fully["accounting_exact"] else 1


if __name__ == "__main__":
    sys.exit(main())
