"""verl 0.9.1's own RewardLoopWorker with its ``naive`` manager vs ``rewardhub``, on the same math samples.

    PYTHONPATH=.venv/verl-compat python bench/bench_verl_manager.py --samples 3000

The worker is verl's own (``verl.experimental.reward_loop.RewardLoopWorker``, built in this process
from a config composed of verl's YAML defaults, as tests/verl_loop_driver.py composes it; a Ray
actor runs the same code), the manager chosen by the legacy key ``reward_model.reward_manager`` and
verl's ``migrate_legacy_reward_impl``. The rewards are verl's default scorer by data source (gsm8k
and MATH rows, half right), so the scores must be equal. Two ways verl calls the worker:

- ``batch``: ``compute_score_batch`` over all samples (what ``RewardLoopManager.compute_rm_score``
  runs on each worker): every ``run_single`` at once, so rewardhub scores them as one group;
- ``agent``: the fully-async agent loop's way: trajectories finish one at a time, each sent by its
  own coroutine (``--agents`` of them, each "generating" for 0-4 ms between trajectories) to
  ``compute_score``; rewardhub groups the calls that arrive together. Prints the mean group size
  and the mean reward latency per trajectory.

Best of ``--repeat`` runs each, alternating; the host may be shared: compare the ratios, not the rates.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _rows(n: int) -> list[dict[str, Any]]:
    kinds = [("openai/gsm8k", "so it is #### {a}"), ("openai/gsm8k", "so it is #### {b}"),
             ("lighteval/MATH", "the answer is \\boxed{{{a}}}"), ("lighteval/MATH", "\\boxed{{{b}}}")]
    rows = []
    for i in range(n):
        src, resp = kinds[i % 4]
        rows.append({"prompt": f"q{i}", "response": resp.format(a=i, b=i + 1), "ground_truth": str(i),
                     "data_source": src, "index": i})
    return rows


async def _agents(worker: Any, datas: list[Any], agents: int, seed: int) -> tuple[list[float], list[float]]:
    rng = random.Random(seed)
    todo = iter(range(len(datas)))
    scores: list[float] = [0.0] * len(datas)
    latency: list[float] = []

    async def agent() -> None:
        for i in todo:
            await asyncio.sleep(rng.uniform(0, 0.004))  # the trajectory's generation finishing
            start = time.perf_counter()
            out = await worker.compute_score(datas[i])
            latency.append(time.perf_counter() - start)
            scores[i] = out["reward_score"]

    await asyncio.gather(*(agent() for _ in range(agents)))
    return scores, latency


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=3000)
    parser.add_argument("--agents", type=int, default=64, help="trajectories in flight at once (agent mode)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    try:
        import verl  # noqa: F401
    except ImportError:  # `make bench`: verl lives in .venv/verl-compat, out of the main environment's way
        import subprocess

        compat = os.path.join(ROOT, ".venv", "verl-compat")
        if not os.path.isdir(os.path.join(compat, "verl")) or os.environ.get("_RH_BENCH_REEXEC"):
            print("verl is not installed (make install puts it in .venv/verl-compat): skipped")
            return 0
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([compat, os.environ.get("PYTHONPATH", "")]),
                   _RH_BENCH_REEXEC="1")
        return subprocess.call([sys.executable, os.path.abspath(__file__), *(argv or sys.argv[1:])], env=env)
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from transformers import AutoTokenizer
    from verl.experimental.reward_loop import RewardLoopWorker
    from verl_loop_driver import compose
    from verl_loop_driver import padded_batch
    from verl_loop_driver import tokenizer_dir
    from verl_loop_driver import trajectory

    folder = tempfile.mkdtemp(prefix="bench_verl_")
    tok_path = tokenizer_dir(folder)
    tok = AutoTokenizer.from_pretrained(tok_path)
    rows = _rows(args.samples)
    datas = [trajectory(tok, r) for r in rows]
    whole = padded_batch(datas)
    base = [f"actor_rollout_ref.model.path={tok_path}"]
    workers = {"naive": RewardLoopWorker(compose(base, True)),
               "rewardhub": RewardLoopWorker(compose(base + ["reward_model.reward_manager=rewardhub"], True))}
    assert type(workers["rewardhub"].reward_manager).__name__ == "RewardhubLoopManager"

    def batch_mode(w: Any) -> tuple[list[float], float]:
        start = time.perf_counter()
        out = w.loop.run_until_complete(w.compute_score_batch(whole))
        return [r["reward_score"] for r in out], time.perf_counter() - start

    def agent_mode(w: Any) -> tuple[list[float], float, float]:
        start = time.perf_counter()
        scores, latency = w.loop.run_until_complete(_agents(w, datas, args.agents, seed=1))
        return scores, time.perf_counter() - start, sum(latency) / len(latency)

    for w in workers.values():  # warm-up: imports, first calls, the Runner's pool
        batch_mode(w)
    best: dict[str, dict[str, float]] = {
        k: {"batch": float("inf"), "agent": float("inf"), "lat": float("inf")} for k in workers
    }
    scores: dict[str, list[float]] = {}
    for _ in range(args.repeat):
        for name, w in workers.items():
            s, t = batch_mode(w)
            scores.setdefault(name, s)
            assert s == scores[name]
            best[name]["batch"] = min(best[name]["batch"], t)
    mgr = workers["rewardhub"].reward_manager
    groups0, samples0 = mgr.batches, mgr.batched_samples
    for _ in range(args.repeat):
        for name, w in workers.items():
            s, t, lat = agent_mode(w)
            assert s == scores[name], "agent mode scores differ from batch mode"
            best[name]["agent"] = min(best[name]["agent"], t)
            best[name]["lat"] = min(best[name]["lat"], lat)
    group = (mgr.batched_samples - samples0) / max(1, mgr.batches - groups0)
    assert scores["naive"] == scores["rewardhub"], "the scores differ"
    n = len(rows)
    nv, rh = best["naive"], best["rewardhub"]
    print(f"{n} samples, verl's RewardLoopWorker, verl's default scorer (gsm8k + MATH), mean score "
          f"{sum(scores['naive']) / n:.3f} (equal for both)")
    print(f"batch (compute_score_batch):  naive {n / nv['batch']:,.0f}/s ({nv['batch']:.2f}s)   "
          f"rewardhub {n / rh['batch']:,.0f}/s ({rh['batch']:.2f}s)   ratio rewardhub/naive "
          f"{nv['batch'] / rh['batch']:.2f}x")
    print(
        f"agent loop ({args.agents} in flight, one at a time): naive {nv['agent']:.2f}s, "
        f"{nv['lat'] * 1e3:.2f} ms/trajectory   rewardhub {rh['agent']:.2f}s, {rh['lat'] * 1e3:.2f} "
        "ms/trajectory"
        f"   ratio {nv['agent'] / rh['agent']:.2f}x; rewardhub's mean group: {group:.1f} samples"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
