"""verl reward managers that score whole batches through rewardhub's Runner.

A verl launch script selects them with one key::

    reward.reward_manager.name=rewardhub

verl imports this module itself: rewardhub declares it under verl's ``verl.plugins`` entry-point
group, which ``import verl`` loads in every verl process (driver and Ray workers alike), and the
module registers the name ``rewardhub`` in both of verl 0.9's manager registries:

- the reward loop's (``verl.experimental.reward_loop.reward_manager``, verl 0.9's default):
  :class:`RewardhubLoopManager`. verl calls ``run_single`` once per sample, all of a worker's
  samples at once; the manager gathers the calls that arrive together and scores them as one batch
  (one decode, one ``Runner.score``), then answers each call;
- the batch managers' (``verl.workers.reward_manager``): :class:`RewardhubBatchManager`, whose
  ``__call__(data, return_dict)`` scores a whole ``DataProto``.

Which rewards: the launch script's own. ``reward.custom_reward_function`` (path, name,
reward_kwargs) becomes a rewardhub term through the config migration, and without one, verl's
default scorer (``verl.utils.reward_score.default_compute_score``, by data source) is the term: the
scores are verl's. ``reward.reward_manager.module.path`` may name a rewardhub YAML config instead
(its ``reward:`` section: several terms, weights, executors, timeouts). Either way the Runner's
policies hold: process isolation and timeouts, ``on_failure``, retries, metrics.

``reward_extra_info`` gets, per sample: ``score`` (the aggregate), each term's value under its
name, and the terms' extra metrics (under their own keys for one term, ``term/key`` for several).

Importing this module without verl installed defines the plain helpers only.
"""

from __future__ import annotations

import asyncio
import atexit
import math
import warnings
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

__all__ = ["MANAGER_NAME", "VerlBatchScorer", "register"]

#: the name a launch script selects (``reward.reward_manager.name=rewardhub``)
MANAGER_NAME = "rewardhub"
#: verl's own scorer, used when the launch script names no custom reward function
VERL_DEFAULT_TERM = {"module": "verl.utils.reward_score", "function": "default_compute_score", "alias": "verl_default"}


def _plain(cfg: Any) -> Any:
    try:
        from omegaconf import OmegaConf

        if OmegaConf.is_config(cfg):
            return OmegaConf.to_container(cfg, resolve=True)
    except ImportError:
        pass
    return cfg


def reward_section(verl_config: Any) -> dict[str, Any]:
    """The rewardhub ``reward:`` section for a verl config: from the rewardhub YAML named by
    ``reward.reward_manager.module.path``, else migrated from verl's own reward keys."""
    from .config import load_config
    from .config.shim import migrate

    cfg = _plain(verl_config) or {}
    verl_reward = cfg.get("reward") or {}
    module = ((verl_reward.get("reward_manager") or {}).get("module") or {}).get("path")
    if module and str(module).endswith((".yaml", ".yml")):
        return dict(_plain(load_config(str(module)).reward))
    with warnings.catch_warnings():  # a launch script's legacy keys are expected here
        warnings.simplefilter("ignore")
        migrated, _ = migrate(cfg)
    section = dict(migrated.get("reward") or {})
    section.pop("manager", None)
    if not section.get("rewards"):
        term: dict[str, Any] = dict(VERL_DEFAULT_TERM)
        sandbox = verl_reward.get("sandbox_fusion") or {}
        if sandbox.get("url"):
            term["kwargs"] = {"sandbox_fusion_url": sandbox["url"],
                              "memory_limit_mb": sandbox.get("memory_limit_mb") or 1024}
        section["rewards"] = [term]
    return {k: v for k, v in section.items() if k in ("rewards", "aggregation", "sandbox", "plugins")}


class VerlBatchScorer:
    """Scores verl batches with a Runner built from a verl config (see the module's text)."""

    def __init__(self, verl_config: Any, reward_fn_key: str = "data_source") -> None:
        from .execution import Runner

        self.reward_fn_key = reward_fn_key
        self.runner = Runner.from_config(reward_section(verl_config))
        self.names = [t.name for t in self.runner.terms]
        atexit.register(self.runner.close)

    # ---- DataProto -> samples ---------------------------------------------------------------
    def samples(self, data: Any, tokenizer: Any) -> list[dict[str, Any]]:
        """One rewardhub sample per row of a ``DataProto``, decoded as verl's managers decode."""
        return self.samples_of([data], tokenizer)

    def samples_of(self, parts: Sequence[Any], tokenizer: Any) -> list[dict[str, Any]]:
        """The samples of several ``DataProto`` (each row once, in order), decoded in one call."""
        ids: list[list[int]] = []
        rows: list[tuple[dict[str, Any], int]] = []
        for data in parts:
            prompt_len = data.batch["prompts"].shape[-1]
            lengths = data.batch["attention_mask"][:, prompt_len:].sum(dim=-1).tolist()
            responses = data.batch["responses"]
            ids += [responses[i][:n].tolist() for i, n in enumerate(lengths)]
            rows += [(data.non_tensor_batch, i) for i in range(len(lengths))]
        out = []
        for text, (nt, i) in zip(_decode(tokenizer, ids), rows):
            rm = nt["reward_model"][i] if "reward_model" in nt else {}
            info = dict(nt["extra_info"][i]) if "extra_info" in nt and nt["extra_info"][i] is not None else {}
            info["num_turns"] = nt["__num_turns__"][i] if "__num_turns__" in nt else None
            info["rollout_reward_scores"] = nt["reward_scores"][i] if "reward_scores" in nt else {}
            out.append({"prompt": nt["raw_prompt"][i] if "raw_prompt" in nt else None, "response": text,
                        "ground_truth": rm.get("ground_truth") if isinstance(rm, Mapping) else None,
                        "data_source": nt[self.reward_fn_key][i] if self.reward_fn_key in nt else None,
                        "extra_info": info})
        return out

    # ---- scoring ------------------------------------------------------------------------------
    def score(self, samples: Sequence[Mapping[str, Any]]) -> tuple[list[float], list[dict[str, Any]]]:
        """(reward per sample, ``reward_extra_info`` per sample)."""
        res = self.runner.score(list(samples))
        scores = [0.0 if s is None else float(s) for s in res.scores]
        infos = []
        one = len(self.names) == 1
        for i, total in enumerate(scores):
            info: dict[str, Any] = {"score": total}
            for name in self.names:
                value = res.rewards[i].get(name)
                info[name] = math.nan if value is None else value
                for key, v in (res.extra[i].get(name) or {}).items():
                    info[key if one and key not in ("score", name) else f"{name}/{key}"] = v
            infos.append(info)
        return scores, infos


def _decode(tokenizer: Any, ids: list[list[int]]) -> list[str]:
    batch = getattr(tokenizer, "batch_decode", None)
    if batch is not None:
        return list(batch(ids, skip_special_tokens=True))
    return [tokenizer.decode(x, skip_special_tokens=True) for x in ids]


def _reward_tensor(data: Any, scores: list[float]) -> Any:
    """verl's token-level reward: each sample's score on its last valid response token."""
    import torch

    prompt_len = data.batch["prompts"].shape[-1]
    lengths = data.batch["attention_mask"][:, prompt_len:].sum(dim=-1)
    out = torch.zeros_like(data.batch["responses"], dtype=torch.float32)
    rows = torch.arange(out.shape[0], device=out.device)
    out[rows, (lengths - 1).clamp(min=0)] = out.new_tensor(scores)
    return out


def _lists(infos: list[dict[str, Any]]) -> dict[str, list[Any]]:
    keys = list(dict.fromkeys(k for info in infos for k in info))
    return {k: [info.get(k) for info in infos] for k in keys}


_registered = False


def register() -> bool:
    """Register :data:`MANAGER_NAME` in verl's reward-manager registries; False without verl.

    Called when this module is imported (verl imports it through its ``verl.plugins`` entry point).
    """
    global _registered
    if _registered:
        return True
    try:
        from verl.experimental.reward_loop.reward_manager import register as register_loop
        from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase
        from verl.workers.reward_manager import register as register_batch
        from verl.workers.reward_manager.abstract import AbstractRewardManager
    except ImportError:
        return False
    _registered = True

    class RewardhubLoopManager(RewardManagerBase):
        """verl's reward loop: ``run_single`` calls that arrive together are scored as one batch."""

        def __init__(self, config: Any, tokenizer: Any, compute_score: Any = None,
                     reward_router_address: Any = None, reward_model_tokenizer: Any = None,
                     **kwargs: Any) -> None:
            super().__init__(config, tokenizer, compute_score)
            self.scorer = VerlBatchScorer(config)
            self._pending: list[tuple[Any, asyncio.Future[dict[str, Any]]]] = []
            #: batches scored so far, and the samples in them (how well calls were gathered)
            self.batches = 0
            self.batched_samples = 0

        async def run_single(self, data: Any) -> dict[str, Any]:
            loop = asyncio.get_running_loop()
            fut: asyncio.Future[dict[str, Any]] = loop.create_future()
            self._pending.append((data[-1:], fut))  # verl scores the last sequence of a multi-sequence item
            if len(self._pending) == 1:
                # runs after every run_single that verl started in the same pass has queued its sample
                loop.call_soon(lambda: asyncio.ensure_future(self._flush()))
            return await fut

        async def _flush(self) -> None:
            pending, self._pending = self._pending, []
            try:
                samples = self.scorer.samples_of([d for d, _ in pending], self.tokenizer)
                loop = asyncio.get_running_loop()
                scores, infos = await loop.run_in_executor(None, self.scorer.score, samples)
            except BaseException as exc:  # noqa: BLE001 - every waiting call gets the failure
                for _, fut in pending:
                    if not fut.done():
                        fut.set_exception(exc)
                if not isinstance(exc, Exception):
                    raise
                return
            self.batches += 1
            self.batched_samples += len(pending)
            for (_, fut), score, info in zip(pending, scores, infos):
                if not fut.done():
                    fut.set_result({"reward_score": score, "reward_extra_info": info})

    class RewardhubBatchManager(AbstractRewardManager):
        """verl's batch reward managers: a whole ``DataProto`` per call."""

        def __init__(self, tokenizer: Any, num_examine: int = 0, compute_score: Any = None,
                     reward_fn_key: str = "data_source", config: Any = None, **kwargs: Any) -> None:
            self.tokenizer = tokenizer
            self.num_examine = num_examine
            self.scorer = VerlBatchScorer(config if config is not None else {}, reward_fn_key)

        def __call__(self, data: Any, return_dict: bool = False) -> Any:
            from_rm = self._extract_reward_from_rm_scores(data, return_dict)
            if from_rm is not None:
                return from_rm
            scores, infos = self.scorer.score(self.scorer.samples(data, self.tokenizer))
            tensor = _reward_tensor(data, scores)
            if return_dict:
                return {"reward_tensor": tensor, "reward_extra_info": _lists(infos)}
            return tensor

    for cls in (RewardhubLoopManager, RewardhubBatchManager):  # found again by name (pickle, logs)
        cls.__module__, cls.__qualname__ = __name__, cls.__name__
    globals()["RewardhubLoopManager"] = RewardhubLoopManager
    globals()["RewardhubBatchManager"] = RewardhubBatchManager
    register_loop(MANAGER_NAME)(RewardhubLoopManager)
    register_batch(MANAGER_NAME)(RewardhubBatchManager)
    return True


register()
