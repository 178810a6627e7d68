"""GPU check: the demo config (examples/arithmetic.yaml) with ``rollout.engine=vllm`` on a GPU.

    python bench/gpu_check.py [--steps 10] [--config examples/arithmetic.yaml] [KEY=VALUE ...]

Where a GPU is present (``torch.cuda.is_available()``) and ``vllm`` imports, trains the demo
config once in ``sync`` mode (the baseline) and once in ``fully_async`` mode, both with the vLLM
rollout engine on the GPU, and prints for each mode:

- rollout tokens/s: response tokens generated per second of the rollouter's generate calls,
- learner step time: the median ``train_s`` of a GRPO step (the learner runs where the trainer
  puts it; this trainer's learner is on the CPU),
- throughput (samples trained per second, first to last step), and the fully-async vs sync ratio
  of it (goal >= 1.3x), plus the exact-accounting and weight-sync figures of each run.

On a machine without a GPU it says so and exits 0 (the CPU vLLM path is covered by tests/vllm_engine).
With a GPU but without ``vllm`` it exits 2 naming the install step. The figures are printed as one
JSON object on the last line as well (``--json``-free: a GPU session pastes them into its note).
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
    if missing:
        print(f"gpu_check: GPU {gpu} found but {missing}\n"
              "install it with: VLLM_PACKAGE=vllm bash scripts/install-vllm.sh VENV", file=sys.stderr)
        return 2
    # Ray hides the GPU from actors that reserve none (CUDA_VISIBLE_DEVICES=""); the rollouter
    # reserves none in this trainer, so let every actor see the machine's devices.
    os.environ.setdefault("RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import yaml

    from rewardhub_trainer.cli import train

    cfg = yaml.safe_load(Path(args.config).read_text())
    samples_per_step = int(cfg["rollout"].get("n", 4)) * int(cfg["rollout"].get("prompts_per_step", 4))
    common = ["rollout.engine=vllm", f"trainer.total_steps={args.steps}", "trainer.checkpoint_every=0",
              *args.overrides]
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        for mode in ("sync", "fully_async"):
            out = Path(tmp) / mode
            t0 = time.perf_counter()
            summary = train(args.config, [*common, f"trainer.mode={mode}"], output=str(out))
            results[mode] = _figures(summary, _rows(out), samples_per_step)
            results[mode]["run_s"] = time.perf_counter() - t0
    sync, fully = results["sync"], results["fully_async"]
    ratio = fully["throughput_samples_per_s"] / sync["throughput_samples_per_s"]
    print(f"gpu_check on {gpu}: {args.config} with rollout.engine=vllm, {args.steps} steps per mode")
    for mode, r in results.items():
        print(f"  {mode:11s} rollout {r['rollout_tokens_per_s']:9.1f} tokens/s  learner step "
              f"{r['learner_step_s']:.3f} s  throughput {r['throughput_samples_per_s']:.2f} samples/s  "
              f"weight syncs {r['weight_syncs']}  accounting exact {r['accounting_exact']}")
    print(f"  fully_async vs sync throughput: {ratio:.2f}x (goal >= 1.3x)")
    print(json.dumps({"gpu": gpu, "ratio_fully_async_vs_sync": ratio, **results}, sort_keys=True))
    return 0 if sync["accounting_exact"] and fully["accounting_exact"] else 1


if __name__ == "__main__":
    sys.exit(main())
