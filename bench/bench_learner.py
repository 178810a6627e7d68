"""Where a GRPO step's time goes on SmolLM2-135M, and how close to the machine's FLOP limit it runs.

    python bench/bench_learner.py [--threads 2] [--repeats 2] [--peak-gflops 78]

One batch of bench_trl.py's shape (8 prompts x 4 completions of up to 64 tokens, fp32): generation
with the prompt cache shared by each prompt's completions vs computed for every completion, and the
learner's forward + backward with :func:`shared_prompt_logprobs` vs :func:`full_logprobs` (in
micro-batches of 8, as the learner runs them). Prints each time, the ratio, the FLOPs counted from the
model's shapes (2 per multiply-add; backward = 2x forward) and the GFLOP/s achieved against the
machine's fp32 peak, measured first in the same run as the best of square fp32 matmuls (1024-4096)
on the same threads, or given with ``--peak-gflops`` (2 AVX2 cores here: ~78).
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def _flops_per_token(cfg) -> tuple[float, float]:
    """(decoder FLOPs per token, LM-head FLOPs per position) of a Llama-shaped model, forward."""
    h, i, layers = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
    kv = cfg.num_key_value_heads * (h // cfg.num_attention_heads)
    per_layer = h * h * 2 + h * kv * 2 + 3 * h * i
    return 2.0 * per_layer * layers, 2.0 * h * cfg.vocab_size


def _matmul_peak(torch) -> float:
    """Best GFLOP/s of square fp32 matmuls: what this machine's BLAS reaches on the model's dtype."""
    best = 0.0
    for n in (1024, 2048, 4096):
        a, b = torch.randn(n, n), torch.randn(n, n)
        a @ b
        for _ in range(3):
            t = time.perf_counter()
            a @ b
            best = max(best, 2 * n**3 / (time.perf_counter() - t) / 1e9)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--peak-gflops", type=float, default=None, help="default: measured")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    from rewardhub_trainer.config import ModelConfig
    from rewardhub_trainer.engine import TransformersEngine
    from rewardhub_trainer.learner import TrainSample
    from rewardhub_trainer.learner import full_logprobs
    from rewardhub_trainer.learner import shared_prompt_logprobs
    from rewardhub_trainer.models import materialize

    torch.set_num_threads(args.threads)
    if args.peak_gflops is None:
        args.peak_gflops = _matmul_peak(torch)
        print(f"fp32 peak measured: {args.peak_gflops:.1f} GFLOP/s on {args.threads} thread(s)")
    path = materialize(ModelConfig(builtin="smollm2-135m"))
    engine = TransformersEngine(path)
    questions = [f"What is {a} + {b}? Answer with the equation and its result, e.g. 2 + 3 = 5"
                 for a, b in [(3, 4), (5, 9), (8, 1), (2, 2), (7, 6), (9, 9), (1, 5), (4, 8)]]
    prompts = [engine.format_prompt(q, "chat", "You are a calculator.") for q in questions]
    body, head = _flops_per_token(engine.model.config)
    real_cache = TransformersEngine._prompt_cache

    def gen(shared: bool) -> tuple[float, list]:
        TransformersEngine._prompt_cache = real_cache if shared else (lambda self, enc, n: None)  # type: ignore[method-assign]
        t = time.perf_counter()
        out = engine.generate(prompts, n=4, max_new_tokens=64, temperature=1.0, top_p=1.0, seed=0)
        return time.perf_counter() - t, out

    times: dict[str, list[float]] = {"gen shared": [], "gen plain": []}
    out: list = []
    for _ in range(args.repeats):
        for mode in ("gen shared", "gen plain"):
            dt, out = gen(mode == "gen shared")
            times[mode].append(dt)
    TransformersEngine._prompt_cache = real_cache  # type: ignore[method-assign]
    samples = [TrainSample(c.prompt_ids, c.response_ids, c.logprobs, float(j % 2) - 0.5)
               for g in out for j, c in enumerate(g)]
    p_len = len(samples[0].prompt_ids)
    steps = 64  # generate runs until every row ends or max_new_tokens
    r_tokens = sum(len(s.response_ids) for s in samples)
    gen_flops = {"gen plain": (32 * (p_len - 1)) * body + 32 * steps * (body + head),
                 "gen shared": (8 * (p_len - 1)) * body + 32 * steps * (body + head)}
    model = engine.model
    model.train()

    def learn(fn) -> float:
        t = time.perf_counter()
        for k in range(0, len(samples), 8):
            chunk = samples[k:k + 8]
            lp, mask = fn(model, chunk, 1.0)
            ((lp * mask).sum() / mask.sum()).backward()
        model.zero_grad(set_to_none=True)
        return time.perf_counter() - t

    times.update({"learn shared": [], "learn full": []})
    for _ in range(args.repeats):
        times["learn shared"].append(learn(shared_prompt_logprobs))
        times["learn full"].append(learn(full_logprobs))
    # forward tokens: full pads each micro-batch to its longest prompt + response and runs the head from the
    # shortest prompt on; shared runs each prompt once (left-padded to the micro-batch's longest), then
    # every response padded to the micro-batch's longest; both run the head on the response tokens only
    full_fwd = shared_fwd = 0.0
    for k in range(0, len(samples), 8):
        chunk = samples[k:k + 8]
        width = max(len(s.prompt_ids) + len(s.response_ids) for s in chunk)
        first = min(len(s.prompt_ids) for s in chunk) - 1
        full_fwd += len(chunk) * (width * body + (width - first) * head)
        prompts = {tuple(s.prompt_ids) for s in chunk}
        shared_fwd += len(prompts) * (max(len(p) for p in prompts) - 1) * body
        shared_fwd += len(chunk) * (1 + max(len(s.response_ids) for s in chunk)) * body
        shared_fwd += sum(len(s.response_ids) for s in chunk) * head
    flops = {**gen_flops, "learn full": 3 * full_fwd, "learn shared": 3 * shared_fwd}
    print(
        f"threads {args.threads}; prompt {p_len} tokens, mean response {r_tokens / len(samples):.1f} tokens"
    )
    best = {k: min(v) for k, v in times.items()}
    for k in ("gen plain", "gen shared", "learn full", "learn shared"):
        gf = flops[k] / best[k] / 1e9
        print(f"{k:13s} {', '.join(f'{t:6.2f}s' for t in times[k])}  {flops[k] / 1e9:7.1f} GFLOP  "
              f"{gf:5.1f} GFLOP/s = {100 * gf / args.peak_gflops:4.0f}% of {args.peak_gflops:.0f}")
    print(f"ratio gen plain/shared {best['gen plain'] / best['gen shared']:.2f}x, "
          f"learn full/shared {best['learn full'] / best['learn shared']:.2f}x; one step (shared): "
          f"{(flops['gen shared'] + flops['learn shared']) / 1e12:.2f} TFLOP "
          f"(before: {(flops['gen plain'] + flops['learn full']) / 1e12:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
