"""verl 0.9.1's reward loop: its own ``naive`` manager vs ``rewardhub`` (reward.reward_manager.name=rewardhub).

    PYTHONPATH=.venv/verl-compat python bench/bench_verl_manager.py --samples 3000

Both managers get the same DataProto batch and are driven the way verl's RewardLoopWorker drives
them (every row's ``run_single`` at once on one event loop); verl's default scorer by data source
(gsm8k and MATH rows, half right). Prints samples per second of each and the ratio; the scores
must be equal. Best of three runs each, alternating; the host may be shared: compare the ratio, not
the rates.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=3000)
    args = parser.parse_args(argv)
    try:
        import verl  # noqa: F401
    except ImportError:  # `make bench`: verl lives in .venv/verl-compat, out of the main environment's way
        import os
        import subprocess

        compat = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".venv", "verl-compat")
        if not os.path.isdir(os.path.join(compat, "verl")) or os.environ.get("_RH_BENCH_REEXEC"):
            print("verl is not installed (make install puts it in .venv/verl-compat): skipped")
            return 0
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([compat, os.environ.get("PYTHONPATH", "")]),
                   _RH_BENCH_REEXEC="1")
        return subprocess.call([sys.executable, os.path.abspath(__file__), *(argv or sys.argv[1:])], env=env)
    import numpy as np
    import torch
    from omegaconf import OmegaConf
    from verl import DataProto
    from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager
    from verl.trainer.ppo.reward import load_reward_manager

    class CharTokenizer:
        def decode(self, ids, skip_special_tokens=True):
            return "".join(chr(int(i)) for i in ids if int(i) != 0)

        def batch_decode(self, seqs, skip_special_tokens=True):
            return [self.decode(s) for s in seqs]

    kinds = [("openai/gsm8k", "so it is #### {a}", "{a}"), ("openai/gsm8k", "so it is #### {b}", "{a}"),
             ("lighteval/MATH", "the answer is \\boxed{{{a}}}", "{a}"), ("lighteval/MATH", "\\boxed{{{b}}}", "{a}")]
    rows = []
    for i in range(args.samples):
        src, resp, gt = kinds[i % 4]
        rows.append((src, resp.format(a=i, b=i + 1), gt.format(a=i)))
    P, R = 4, 40
    responses = [[ord(c) for c in r][:R] for _, r, _ in rows]
    data = DataProto.from_dict(
        tensors={"prompts": torch.ones(len(rows), P, dtype=torch.long) * ord("q"),
                 "responses": torch.tensor([r + [0] * (R - len(r)) for r in responses]),
                 "attention_mask": torch.tensor([[1] * (P + len(r)) + [0] * (R - len(r)) for r in responses])},
        non_tensors={"data_source": np.array([s for s, _, _ in rows], dtype=object),
                     "reward_model": np.array([{"ground_truth": g} for _, _, g in rows], dtype=object),
                     "extra_info": np.array([{"index": i} for i in range(len(rows))], dtype=object)})
    cfg = OmegaConf.create({"reward": {"custom_reward_function": {"path": None, "name": "compute_score"},
                                       "reward_manager": {"source": "register", "name": "rewardhub"},
                                       "reward_model": {"enable": False}, "sandbox_fusion": {"url": None}}})
    tok = CharTokenizer()

    items = [data[i:i + 1] for i in range(len(data))]  # as RewardLoopWorker slices its chunk (not timed)

    def drive(manager):
        async def go():
            return await asyncio.gather(*(manager.run_single(item) for item in items))
        start = time.perf_counter()
        out = manager.loop.run_until_complete(go())
        return [r["reward_score"] for r in out], time.perf_counter() - start

    ours_mgr = load_reward_manager(cfg, tok, reward_router_address=None, reward_model_tokenizer=None)
    drive(ours_mgr)  # warm-up: imports, first calls
    theirs_mgr = NaiveRewardManager(cfg, tok, None)
    drive(theirs_mgr)
    t_ours = t_theirs = float("inf")
    for _ in range(3):  # alternating, best of three: the host may be shared
        ours, t = drive(ours_mgr)
        t_ours = min(t_ours, t)
        theirs, t = drive(theirs_mgr)
        t_theirs = min(t_theirs, t)
    assert ours == theirs, "the scores differ"
    n = len(rows)
    print(f"verl naive (reward loop): {n / t_theirs:,.0f} samples/s ({t_theirs:.2f}s)")
    print(f"rewardhub manager:        {n / t_ours:,.0f} samples/s ({t_ours:.2f}s)")
    print(f"ratio rewardhub/verl: {t_theirs / t_ours:.2f}x, scores equal, mean {sum(ours) / n:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
