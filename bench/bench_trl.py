"""TRL's GRPOTrainer vs rewardhub-trainer on SmolLM2-135M-Instruct: completions and generated tokens per
second.

    python bench/bench_trl.py --steps 3

Equal settings: 8 prompts x 4 completions per step, at most 64 new tokens, fp32 everywhere,
temperature 1.0, no KL, one PPO epoch, learning rate 1e-6 decaying linearly (TRL's default), the same
reasoning-gym arithmetic prompts rendered to the same text (examples/arithmetic.yaml's chat template, system
prompt and instruction: TRL gets the text) and the same two rewards (TRL: a number match and the same format
regex as plain functions; ours: math_verify + regex_match in reward workers). The first step of each is
warm-up and not timed. Prints, for both, completions/s, generated tokens/s and the mean completion length,
then both ratios (goal: ours >= 2x TRL in each).

Both sides run at the same CPU priority: Ray starts its workers (our rollouter, learner and reward
workers) at nice 15 by default, TRL runs in this process at nice 0, so any other load on the host would
take its CPU time from ours first; ``RAY_worker_niceness=0`` is set here before Ray starts. The runs are
interleaved, ``--repeats`` pairs in turn (ours, TRL, TRL, ours, ...: neither side always runs first
or on a warmer host), and the ratio printed is the median of the pairs' ratios, with their range.

    python bench/bench_trl.py --skip-trl --against trainer.lend_idle_cores=never

runs ours a second time with those overrides (here: no threads lent between the learner and the
rollouter, rewardhub_trainer/cores.py) and prints the ratio between the two.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PROMPTS, N, NEW_TOKENS = 8, 4, 64


def _data_config(size: int):
    """examples/arithmetic.yaml's data section (template, system prompt, instruction), ``size`` prompts."""
    import dataclasses

    import yaml

    from rewardhub_trainer.config import parse_config

    cfg = parse_config(yaml.safe_load((ROOT / "examples" / "arithmetic.yaml").read_text()))
    return dataclasses.replace(cfg.data, size=size)


def trl_rate(model_path: str, steps: int) -> tuple[float, float]:
    """TRL's completions/s and mean completion length (tokens) over the timed steps."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM
    from transformers import TrainerCallback
    from trl import GRPOConfig
    from trl import GRPOTrainer

    from rewardhub_trainer.data import load_dataset
    from rewardhub_trainer.data import render
    from rewardhub_trainer.models import load_tokenizer

    torch.set_num_threads(os.cpu_count() or 1)
    data = _data_config(max(PROMPTS * (steps + 1), 64))
    tok = load_tokenizer(model_path)
    ds, _ = render(load_dataset(data), tok, data, "data")
    rows = [{"prompt": p.text, "answer": p.ground_truth} for p in ds.items]

    def correct(completions, answer, **kwargs):
        out = []
        for c, a in zip(completions, answer):
            text = c[0]["content"] if isinstance(c, list) else str(c)
            nums = re.findall(r"-?\d+", text)
            out.append(float(bool(nums) and nums[-1] == a))
        return out

    def format_ok(completions, **kwargs):
        return [
            0.5 * float(bool(re.search(r"= *-?[0-9]+\.? *$", c if isinstance(c, str) else c[0]["content"])))
            for c in completions
        ]

    times: list[float] = []
    lengths: list[float] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, *a, **k):
            self.t = time.perf_counter()

        def on_step_end(self, *a, **k):
            times.append(time.perf_counter() - self.t)

        def on_log(self, args, state, control, logs=None, **k):
            if logs and "completions/mean_length" in logs:
                lengths.append(float(logs["completions/mean_length"]))

    with tempfile.TemporaryDirectory() as out:
        cfg = GRPOConfig(output_dir=out, per_device_train_batch_size=PROMPTS * N, num_generations=N,
                         max_completion_length=NEW_TOKENS, max_steps=steps, learning_rate=1e-6,
                         temperature=1.0, beta=0.0, use_cpu=True, bf16=False, fp16=False,
                         report_to=[], logging_steps=1, save_strategy="no", use_vllm=False,
                         dataloader_num_workers=0)
        model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
        trainer = GRPOTrainer(model=model, reward_funcs=[correct, format_ok], args=cfg,
                              train_dataset=Dataset.from_list(rows),
                              processing_class=tok, callbacks=[Clock()])
        trainer.train()
    timed, lens = (times[1:], lengths[1:]) if len(times) > 1 else (times, lengths)
    return PROMPTS * N * len(timed) / sum(timed), sum(lens) / max(1, len(lens))


def ours_rate(steps: int, mode: str, extra: list[str] | None = None) -> tuple[float, float]:
    """Our completions/s and mean completion length (tokens) over the timed steps."""
    from rewardhub_trainer.cli import train

    with tempfile.TemporaryDirectory() as out:
        s = train(str(ROOT / "examples" / "arithmetic.yaml"), [
            f"trainer.total_steps={steps + 1}", f"trainer.mode={mode}", "trainer.autocast=none",
            "trainer.kl_coef=0.0", "trainer.micro_batch_size=8", f"rollout.prompts_per_step={PROMPTS}",
            f"rollout.n={N}", f"rollout.max_new_tokens={NEW_TOKENS}", "rollout.temperature=1.0",
            "rollout.dtype=float32", "model.dtype=float32",
            # the demo's line-break stop and held-out evaluation are not TRL's settings: off here
            "rollout.stop=null", "trainer.val_before_train=false", "data.val_files=null",
            # TRL's learning rate (GRPOConfig's default) and its linear decay over the run: a larger
            # one changes the policy faster, and with it the completions' lengths (tokens/s)
            "trainer.lr=1e-6", "trainer.lr_schedule=linear", *(extra or [])], output=out)
        rows = [__import__("json").loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    # completions per second after the first step (warm-up), as for TRL
    t = rows[-1]["time/elapsed_s"] - rows[0]["time/elapsed_s"]
    mean_len = sum(r["response_len/mean"] for r in rows[1:]) / max(1, len(rows) - 1)
    return (PROMPTS * N * (len(rows) - 1) / t if t > 0 else s["throughput_samples_per_s"]), mean_len


def _line(name: str, rate: float, mean_len: float) -> str:
    return (f"{name:32s} {rate:7.3f} completions/s  {rate * mean_len:8.1f} generated tokens/s  "
            f"mean length {mean_len:5.1f} tokens")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3, help="timed steps (one more runs as warm-up)")
    parser.add_argument("--mode", default="fully_async", choices=["sync", "fully_async"])
    parser.add_argument("--skip-trl", action="store_true")
    parser.add_argument("--repeats", type=int, default=3,
                        help="pairs of runs, interleaved; the median ratio is printed (default 3)")
    parser.add_argument("--against", metavar="KEY=VALUE", action="append", default=[],
                        help="also run ours with these overrides (e.g. trainer.lend_idle_cores=never), "
                             "and print the ratio to it")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be 1 or more")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # Ray would run our side's workers at nice 15 (TRL runs here, at this process's priority)
    os.environ["RAY_worker_niceness"] = "0"
    from rewardhub_trainer.config import ModelConfig
    from rewardhub_trainer.models import materialize

    path = materialize(ModelConfig(builtin="smollm2-135m"))
    against = " ".join(args.against)
    sides: dict[str, Any] = {f"rewardhub-trainer ({args.mode})": lambda: ours_rate(args.steps, args.mode)}
    if args.against:
        sides[f"  with {against}"] = lambda: ours_rate(args.steps, args.mode, args.against)
    if not args.skip_trl:
        sides["TRL GRPOTrainer"] = lambda: trl_rate(path, args.steps + 1)
    names = list(sides)
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    for r in range(args.repeats):  # in turn, the order reversed every other repeat
        for name in (names if r % 2 == 0 else names[::-1]):
            runs[name].append(sides[name]())
            print(_line(f"{name} [{r + 1}]", *runs[name][-1]), flush=True)
    ours = runs[names[0]]
    for name in names[1:]:
        base = runs[name]
        rates = [a[0] / b[0] for a, b in zip(ours, base)]
        tokens = [a[0] * a[1] / (b[0] * b[1]) for a, b in zip(ours, base)]
        what = f"ours/with {against}" if name != "TRL GRPOTrainer" else "ours/TRL"
        print(f"ratio {what}: {_median(rates):.2f}x completions/s (range {min(rates):.2f}-{max(rates):.2f}), "
              f"{_median(tokens):.2f}x generated tokens/s (range {min(tokens):.2f}-{max(tokens):.2f}) over "
              f"{len(rates)} interleaved pair{'s' * (len(rates) != 1)}"
              + (" (goal 2x each)" if name == "TRL GRPOTrainer" else ""), flush=True)
    return 0


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    return (s[(len(s) - 1) // 2] + s[len(s) // 2]) / 2


if __name__ == "__main__":
    sys.exit(main())
