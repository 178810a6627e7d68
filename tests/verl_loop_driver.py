"""Runs verl 0.9.1's own reward loop on CPU with Ray, for tests/test_verl_reward_loop.py and
bench/bench_verl_manager.py (run with verl on the path: ``PYTHONPATH=.venv/verl-compat``).

The config is composed from verl's own YAML defaults as ``fully_async_main.py`` gets it from Hydra
(``fully_async_ppo_trainer.yaml`` = verl's composed ``ppo_trainer`` defaults, in verl's
``_generated_ppo_trainer.yaml``, plus its own keys), with the user's overrides on top; then
``migrate_legacy_reward_impl`` is called exactly as ``fully_async_main.main`` calls it (or not).
verl's ``RewardLoopManager`` starts its ``RewardLoopWorker`` Ray actors from it, and the
trajectories are sent to them one at a time, as verl's agent loop does
(``AgentLoopWorker._compute_score``: one ``compute_score.remote`` per finished trajectory, built the
same way), each from its own asyncio task, arriving a few milliseconds apart.

    python tests/verl_loop_driver.py PLAN.json   # prints one JSON line (see run())
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import time
from typing import Any


def compose(overrides: list[str], migrate: bool) -> Any:
    import verl
    from omegaconf import OmegaConf

    root = os.path.dirname(verl.__file__)
    base = OmegaConf.load(os.path.join(root, "trainer", "config", "_generated_ppo_trainer.yaml"))
    own = OmegaConf.load(os.path.join(root, "experimental", "fully_async_policy", "config",
                                      "fully_async_ppo_trainer.yaml"))
    for key in ("hydra", "defaults"):  # Hydra's own: the search path and the ppo_trainer defaults above
        own.pop(key)
    config = OmegaConf.merge(base, own, OmegaConf.from_dotlist(overrides))
    OmegaConf.set_struct(config, True)  # as Hydra hands it over
    # what fully_async_main.main does before run_ppo
    config.actor_rollout_ref.rollout.nnodes = config.rollout.nnodes
    config.actor_rollout_ref.rollout.n_gpus_per_node = config.rollout.n_gpus_per_node
    if migrate:
        from verl.experimental.reward_loop import migrate_legacy_reward_impl

        config = migrate_legacy_reward_impl(config)
    return config


def tokenizer_dir(folder: str) -> str:
    """A byte-level tokenizer (no files to download), saved where verl's hf_tokenizer loads it."""
    from transformers import ByT5Tokenizer

    path = os.path.join(folder, "tokenizer")
    if not os.path.isdir(path):
        ByT5Tokenizer().save_pretrained(path)
    return path


def trajectory(tok: Any, row: dict[str, Any]) -> Any:
    """The DataProto verl's agent loop sends for one finished trajectory (AgentLoopWorker._compute_score)."""
    import numpy as np
    import torch
    from tensordict import TensorDict
    from verl import DataProto

    prompt_ids = tok.encode(row["prompt"], add_special_tokens=False)
    response_ids = tok.encode(row["response"], add_special_tokens=False) + [tok.eos_token_id]
    prompts = torch.tensor(prompt_ids, dtype=torch.int64)
    responses = torch.tensor(response_ids, dtype=torch.int64)
    input_ids = torch.cat([prompts, responses])
    mask = torch.ones_like(input_ids)
    batch = TensorDict({"prompts": prompts[None], "responses": responses[None], "attention_mask": mask[None],
                        "input_ids": input_ids[None], "position_ids": torch.arange(len(input_ids))[None]},
                       batch_size=1)
    kwargs = {"data_source": row["data_source"], "reward_model": {"ground_truth": row["ground_truth"]},
              "extra_info": {"index": row["index"], "split": "train"},
              "raw_prompt": [{"role": "user", "content": row["prompt"]}], "agent_name": "single_turn_agent"}
    non_tensor = {
        k: np.array([v]) if not isinstance(v, (dict, list)) else _objects([v]) for k, v in kwargs.items()
    }
    non_tensor.update(
        {
            "__num_turns__": np.array([2]),
            "tool_extra_fields": _objects([row.get("tool_fields") or {}]),
            "prompt_len": np.array([len(prompt_ids)]),
            "response_len": np.array([len(response_ids)]),
        }
    )
    data = DataProto(batch=batch, non_tensor_batch=non_tensor)
    _break(data, row.get("break"))
    return data


def _break(data: Any, how: str | None) -> None:
    """A malformed trajectory, as a user's dataset can give one (``break`` in a plan's row)."""
    nt = data.non_tensor_batch
    if how == "extra_info_text":
        nt["extra_info"] = _objects(["index 7"])
    elif how == "no_reward_model":
        del nt["reward_model"]
    elif how == "ground_truth_none":
        nt["reward_model"] = _objects([{"ground_truth": None}])
    elif how == "no_ground_truth_key":
        nt["reward_model"] = _objects([{"answer": "1"}])


def padded_batch(datas: list[Any]) -> Any:
    """The trajectories as one batch the way verl's trainer holds it: prompts left-padded,
    responses right-padded, attention_mask over both (for RewardLoopManager.compute_rm_score)."""
    import numpy as np
    import torch
    from tensordict import TensorDict
    from verl import DataProto

    P = max(d.batch["prompts"].shape[-1] for d in datas)
    R = max(d.batch["responses"].shape[-1] for d in datas)
    prompts, responses, masks = [], [], []
    for d in datas:
        p, r = d.batch["prompts"][0], d.batch["responses"][0]
        prompts.append(torch.cat([torch.zeros(P - len(p), dtype=torch.int64), p]))
        responses.append(torch.cat([r, torch.zeros(R - len(r), dtype=torch.int64)]))
        masks.append(
            torch.cat(
                [
                    torch.zeros(P - len(p), dtype=torch.int64),
                    torch.ones(len(p) + len(r), dtype=torch.int64),
                    torch.zeros(R - len(r), dtype=torch.int64),
                ]
            )
        )
    batch = TensorDict({"prompts": torch.stack(prompts), "responses": torch.stack(responses),
                        "attention_mask": torch.stack(masks)}, batch_size=len(datas))
    keys = [k for k in datas[0].non_tensor_batch if k not in ("prompt_len", "response_len")]
    non_tensor = {k: _objects([d.non_tensor_batch[k][0] for d in datas]) for k in keys}
    non_tensor["__num_turns__"] = np.array([2] * len(datas))
    return DataProto(batch=batch, non_tensor_batch=non_tensor)


def _objects(values: list[Any]) -> Any:
    import numpy as np

    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def _fresh_actors_gone(ray: Any, n: int) -> None:
    """Kill the reward workers of an earlier RewardLoopManager, so that their names are free again."""
    for i in range(n):
        name = f"reward_loop_worker_{i}"
        try:
            ray.kill(ray.get_actor(name))
        except ValueError:
            continue
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                ray.get_actor(name)
            except ValueError:
                break
            time.sleep(0.05)


async def one_at_a_time(handles: list[Any], datas: list[Any], seed: int = 0) -> tuple[list[Any], list[float]]:
    """Each trajectory from its own task, a few ms apart, to a worker picked at random (the agent loop's
    way)."""
    rng = random.Random(seed)
    delays = [rng.uniform(0, 0.004) * i for i in range(len(datas))]

    async def send(i: int) -> tuple[Any, float]:
        await asyncio.sleep(delays[i])
        start = time.perf_counter()
        try:
            out = await rng.choice(handles).compute_score.remote(datas[i])
        except Exception as exc:  # noqa: BLE001 - reported as data
            out = {"error": f"{type(exc).__name__}: {exc}"}
        return out, time.perf_counter() - start

    got = await asyncio.gather(*(send(i) for i in range(len(datas))))
    return [g[0] for g in got], [g[1] for g in got]


async def local_one_at_a_time(worker: Any, datas: list[Any]) -> list[Any]:
    got = await asyncio.gather(*(worker.compute_score(d) for d in datas), return_exceptions=True)
    return [{"error": f"{type(g).__name__}: {g}"} if isinstance(g, BaseException) else g for g in got]


def _clean(x: Any) -> Any:
    import numpy as np

    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, float) and x != x:
        return "nan"
    return x


def run(plan: dict[str, Any]) -> dict[str, Any]:
    """plan: {folder, rows, runs: [{name, overrides, migrate, naive_overrides?, batch_path?, local?, rows?}]}.

    Each run starts a RewardLoopManager from its config and sends it the rows one at a time (with
    ``local``: verl's RewardLoopWorker in this process instead; with ``batch_path``: also verl's
    ``compute_rm_score`` over them as one padded batch; with ``rows``: those rows, not the plan's);
    with ``naive_overrides``, verl's RewardLoopWorker (in this process) with that config scores the
    same trajectories. A row may carry ``break`` (see :func:`_break`). Returns
    {name: {manager, ours, naive, latency, stats, rm_scores, rm_keys}} (``error`` if it failed).
    """
    import ray
    from transformers import AutoTokenizer
    from verl.experimental.reward_loop import RewardLoopManager
    from verl.experimental.reward_loop import RewardLoopWorker

    folder = plan["folder"]
    tok_path = tokenizer_dir(folder)
    tok = AutoTokenizer.from_pretrained(tok_path)
    all_datas = [trajectory(tok, r) for r in plan["rows"]]
    base = [f"actor_rollout_ref.model.path={tok_path}", "reward.num_workers=1"]
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    out: dict[str, Any] = {}
    for spec in plan["runs"]:
        res: dict[str, Any] = {}
        datas = [trajectory(tok, r) for r in spec["rows"]] if "rows" in spec else all_datas
        try:
            config = compose(base + spec["overrides"], spec.get("migrate", True))
            if spec.get("local"):  # verl's RewardLoopWorker in this process, not as a Ray actor
                worker = RewardLoopWorker(config)
                res["manager"] = type(worker.reward_manager).__name__
                res["ours"] = worker.loop.run_until_complete(local_one_at_a_time(worker, datas))
                out[spec["name"]] = res
                continue
            _fresh_actors_gone(ray, 4)
            manager = RewardLoopManager(config)
            handles = manager.reward_loop_workers
            res["manager"] = ray.get(
                handles[0].__ray_call__.remote(lambda w: type(w.reward_manager).__name__)
            )
            start = time.perf_counter()
            ours, latency = asyncio.run(one_at_a_time(handles, datas))
            res["wall_s"] = time.perf_counter() - start
            res["ours"], res["latency"] = ours, latency
            res["stats"] = ray.get(handles[0].__ray_call__.remote(lambda w: {
                k: getattr(w.reward_manager, k, None) for k in ("batches", "batched_samples")}))
            if spec.get("batch_path"):  # verl's other path: compute_rm_score over the whole batch
                rm = manager.compute_rm_score(padded_batch(datas))
                res["rm_scores"] = rm.batch["rm_scores"].sum(dim=-1).tolist()
                res["rm_keys"] = list(rm.meta_info["reward_extra_keys"])
        except Exception as exc:  # noqa: BLE001 - the test reads it
            res["error"] = f"{type(exc).__name__}: {exc}"
        if spec.get("naive_overrides") is not None:
            worker = RewardLoopWorker(compose(base + spec["naive_overrides"], True))
            res["naive_manager"] = type(worker.reward_manager).__name__
            res["naive"] = worker.loop.run_until_complete(local_one_at_a_time(worker, datas))
        out[spec["name"]] = res
    ray.shutdown()
    return _clean(out)


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        print(json.dumps(run(json.load(f)), default=str))
