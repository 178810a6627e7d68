"""The demo's dtypes: a few rollout + learner steps of SmolLM2-135M in fp32 vs the ``auto`` choice.

    python bench/bench_demo_dtype.py [--steps 3] [--bf16] [--threads N]   # threads: half the cores

Loads the demo model (examples/arithmetic.yaml: ``model.builtin: smollm2-135m``), then for each
setting samples the demo's batch (2 prompts x 4 responses, 16 new tokens, T=0.8) with the
transformers engine and runs one GRPO step on it with the learner, ``--steps`` times, in this
process (no Ray). Settings: ``fp32`` (autocast none, float32 weights), ``auto`` (what
:func:`rewardhub_trainer.devices.choose` picks here) and, with ``--bf16``, forced bf16 (slow where
bf16 is emulated: one step can take minutes on an AVX2 CPU). Prints the median seconds per
generate and per train step of each, the ratio of each setting to fp32, and the bf16/fp32 time of
one 576x576 @ 576x2304 matmul (the size the issue measured). Where ``auto`` is fp32 (no native bf16)
it is not timed twice. Run it on an idle machine for absolute figures; the ratios are what it is for.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

PROMPTS = ["What is 3 + 4? Answer with the equation and its result, e.g. 2 + 3 = 5",
           "What is 8 - 5? Answer with the equation and its result, e.g. 2 + 3 = 5"]


def _time_setting(path: str, autocast: str, dtype: str, steps: int) -> tuple[float, float]:
    from rewardhub_trainer.engine import TransformersEngine
    from rewardhub_trainer.learner import GRPOLearner
    from rewardhub_trainer.learner import LearnerSettings
    from rewardhub_trainer.learner import TrainSample

    engine = TransformersEngine(path, dtype=dtype)
    learner = GRPOLearner(
        path, LearnerSettings(lr=3e-5, temperature=0.8, micro_batch_size=8, autocast=autocast)
    )
    texts = [engine.format_prompt(p, "chat", "You are a calculator.") for p in PROMPTS]
    gen, train = [], []
    for step in range(steps):
        t0 = time.perf_counter()
        groups = engine.generate(texts, n=4, max_new_tokens=16, temperature=0.8, top_p=1.0, seed=step)
        gen.append(time.perf_counter() - t0)
        samples = [TrainSample(c.prompt_ids, c.response_ids, c.logprobs, 1.0 if j % 2 else -1.0)
                   for g in groups for j, c in enumerate(g)]
        t0 = time.perf_counter()
        learner.train_step(samples)
        train.append(time.perf_counter() - t0)
    return statistics.median(gen), statistics.median(train)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument(
        "--bf16", action="store_true", help="also time forced bf16 (slow without native bf16)"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=max(1, (os.cpu_count() or 2) // 2),
        help="torch threads (default: half the cores, as each of the demo's rollouter and learner "
        "gets in fully_async mode; more threads than free cores is much slower on a busy host)",
    )
    args = parser.parse_args(argv)
    import torch

    from rewardhub_trainer.config import ModelConfig
    from rewardhub_trainer.devices import bf16_slowdown
    from rewardhub_trainer.devices import choose
    from rewardhub_trainer.models import materialize

    torch.set_num_threads(args.threads)
    path = materialize(ModelConfig(builtin="smollm2-135m"))
    choice = choose()
    print(
        f"bench_demo_dtype: {choice.reason}; auto = autocast {choice.autocast}, rollout "
        f"{choice.rollout_dtype}; "
        f"{torch.get_num_threads()} torch threads; load average {os.getloadavg()[0]:.1f} at start"
    )
    settings = {"fp32": ("none", "float32"), "auto": (choice.autocast, choice.rollout_dtype)}
    if args.bf16:
        settings["bf16"] = ("bfloat16", "bfloat16")
    print(f"  matmul 576x576 @ 576x2304: bf16 takes {bf16_slowdown('cpu', 576, 3):.1f}x the fp32 time",
          flush=True)
    base_gen = base_train = 0.0
    for name, (autocast, dtype) in settings.items():
        if name == "auto" and (autocast, dtype) == settings["fp32"]:
            print("  auto  is fp32 on this machine: the same setting (not timed twice)")
            continue
        gen, train = _time_setting(path, autocast, dtype, args.steps)
        if name == "fp32":
            base_gen, base_train = gen, train
        print(f"  {name:5s} generate {gen:6.2f} s  train step {train:6.2f} s  "
              f"(x{gen / base_gen:.2f} and x{train / base_train:.2f} the fp32 time)", flush=True)
    print(f"  load average {os.getloadavg()[0]:.1f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
