"""TRL's GRPOTrainer vs rewardhub-trainer on SmolLM2-135M-Instruct, completions per second.

    python bench/bench_trl.py --steps 3

Equal settings: 8 prompts x 4 completions per step, 64 new tokens, fp32 everywhere, temperature
1.0, no KL, the same reasoning-gym arithmetic prompts and the same two rewards (a number-match
reward for TRL as a plain function; math_verify + regex for ours). The first step of each is
warm-up and not timed. Prints both rates and the ratio (goal: ours >= 3x TRL).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROMPTS, N, NEW_TOKENS = 8, 4, 64


def trl_rate(model_path: str, steps: int) -> float:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM
    from transformers import TrainerCallback
    from trl import GRPOConfig
    from trl import GRPOTrainer

    from rewardhub_trainer.config import DataConfig
    from rewardhub_trainer.data import load_dataset
    from rewardhub_trainer.models import load_tokenizer

    torch.set_num_threads(os.cpu_count() or 1)
    ds = load_dataset(DataConfig(source="reasoning_gym", size=PROMPTS * (steps + 1), seed=0,
                                 kwargs={"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}))
    rows = [{"prompt": [{"role": "user", "content": p.question}], "answer": p.ground_truth} for p in ds.items]

    def correct(completions, answer, **kwargs):
        out = []
        for c, a in zip(completions, answer):
            text = c[0]["content"] if isinstance(c, list) else str(c)
            nums = re.findall(r"-?\d+", text)
            out.append(float(bool(nums) and nums[-1] == a))
        return out

    times: list[float] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, *a, **k):
            self.t = time.perf_counter()

        def on_step_end(self, *a, **k):
            times.append(time.perf_counter() - self.t)

    with tempfile.TemporaryDirectory() as out:
        cfg = GRPOConfig(output_dir=out, per_device_train_batch_size=PROMPTS * N, num_generations=N,
                         max_completion_length=NEW_TOKENS, max_steps=steps, learning_rate=1e-6,
                         temperature=1.0, beta=0.0, use_cpu=True, bf16=False, fp16=False,
                         report_to=[], logging_steps=1, save_strategy="no", use_vllm=False,
                         dataloader_num_workers=0)
        model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
        trainer = GRPOTrainer(model=model, reward_funcs=[correct], args=cfg,
                              train_dataset=Dataset.from_list(rows),
                              processing_class=load_tokenizer(model_path), callbacks=[Clock()])
        trainer.train()
    timed = times[1:] or times
    return PROMPTS * N * len(timed) / sum(timed)


def ours_rate(steps: int, mode: str) -> float:
    from rewardhub_trainer.cli import train

    with tempfile.TemporaryDirectory() as out:
        s = train(str(ROOT / "examples" / "arithmetic.yaml"), [
            f"trainer.total_steps={steps + 1}", f"trainer.mode={mode}", "trainer.autocast=none",
            "trainer.kl_coef=0.0", "trainer.micro_batch_size=8", f"rollout.prompts_per_step={PROMPTS}",
            f"rollout.n={N}", f"rollout.max_new_tokens={NEW_TOKENS}", "rollout.temperature=1.0",
            "rollout.dtype=float32", "model.dtype=float32"], output=out)
        rows = [__import__("json").loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    # completions per second after the first step (warm-up), as for TRL
    t = rows[-1]["time/elapsed_s"] - rows[0]["time/elapsed_s"]
    return PROMPTS * N * (len(rows) - 1) / t if t > 0 else s["throughput_samples_per_s"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3, help="timed steps (one more runs as warm-up)")
    parser.add_argument("--mode", default="fully_async", choices=["sync", "fully_async"])
    parser.add_argument("--skip-trl", action="store_true")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from rewardhub_trainer.config import ModelConfig
    from rewardhub_trainer.models import materialize

    path = materialize(ModelConfig(builtin="smollm2-135m"))
    ours = ours_rate(args.steps, args.mode)
    print(f"rewardhub-trainer ({args.mode}): {ours:.3f} completions/s", flush=True)
    if args.skip_trl:
        return 0
    trl = trl_rate(path, args.steps + 1)
    print(f"TRL GRPOTrainer:                {trl:.3f} completions/s")
    print(f"ratio ours/TRL: {ours / trl:.2f}x (goal 3x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
