"""verl reward managers that score whole batches through rewardhub's Runner.

A verl launch script selects them with one key::

    reward.reward_manager.name=rewardhub        # or the legacy reward_model.reward_manager=rewardhub

verl imports this module itself: rewardhub declares it under verl's ``verl.plugins`` entry-point
group, which ``import verl`` loads in every verl process (driver and Ray workers alike), and the
module registers the name ``rewardhub`` in both of verl 0.9's manager registries:

- the reward loop's (``verl.experimental.reward_loop.reward_manager``, verl 0.9's default):
  :class:`RewardhubLoopManager`. verl calls ``run_single`` once per sample (all of a worker's samples
  at once from ``compute_score_batch``, or one trajectory at a time from the agent loop); the
  manager gathers the calls that arrive together and scores them as one batch (one decode, one
  ``Runner.score``), then answers each call. Groups still scoring when the next arrive run side by
  side on the same Runner (its process pool takes concurrent callers);
- the batch managers' (``verl.workers.reward_manager``): :class:`RewardhubBatchManager`, whose
  ``__call__(data, return_dict)`` scores a whole ``DataProto``.

Which rewards: the launch script's own. ``reward.custom_reward_function`` (path, name,
reward_kwargs) becomes a rewardhub term through the config migration, and without one, verl's
default scorer (``verl.utils.reward_score.default_compute_score``, by data source) is the term: the
scores are verl's. ``reward.reward_manager.module.path`` may name a rewardhub YAML config instead
(its ``reward:`` section: several terms, weights, executors, timeouts); naming both is an error.
A config that still holds verl's legacy keys (``verl.experimental.reward_loop.migrate_legacy_reward_impl``
not called) is read as that function would migrate it: a set legacy ``custom_reward_function`` wins
over verl's defaults under ``reward.``. Either way the Runner's policies hold: process isolation and
timeouts, ``on_failure``, retries, metrics.

``reward_extra_info`` gets, per sample (the same keys on every sample, as verl stacks them):
``score`` (the reward verl gets), ``acc`` (as verl's ``naive`` manager gives it: the score, or the
reward's own ``acc``; None for a failed sample), each term's value under its name, the terms' extra
metrics (under their own keys for one term, ``term/key`` for several), ``rewardhub_failed`` (1.0
where a reward call failed or the sample had no ground truth that a reward needs, else 0.0: its
mean is verl's failure-rate metric) and ``rewardhub_error`` (the error text, "" if none). A failed
sample's ``reward_score`` is what the term's ``on_failure`` says: ``zero`` 0.0 (the default here, unlike
rewardhub's own NaN: verl cannot leave a sample out, and NaN would poison its group), ``nan`` NaN,
``raise`` an error for the whole call, ``drop`` 0.0.

Importing this module without verl installed defines the plain helpers only.
"""

from __future__ import annotations

import asyncio
import atexit
import dataclasses
import math
import warnings
from collections.abc import Mapping
from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Any

if TYPE_CHECKING:
    from .config.schema import RewardConfig

__all__ = ["MANAGER_NAME", "VerlBatchScorer", "register"]

#: the name a launch script selects (``reward.reward_manager.name=rewardhub``)
MANAGER_NAME = "rewardhub"
#: verl's own scorer, used when the launch script names no custom reward function
VERL_DEFAULT_TERM = {
    "module": "verl.utils.reward_score",
    "function": "default_compute_score",
    "alias": "verl_default",
}


def _legacy_applied(cfg: dict[str, Any]) -> dict[str, Any]:
    """A verl config whose legacy reward keys were not migrated (verl's ``migrate_legacy_reward_impl``
    was not called), with those keys applied by that function's rule: a legacy block with a value
    set replaces its place under ``reward.`` (verl's defaults there are no choice of the user's)."""
    cfg = dict(cfg)
    reward = dict(cfg.get("reward") or {})
    for legacy, new in (
        ("custom_reward_function", "custom_reward_function"),
        ("sandbox_fusion", "sandbox_fusion"),
    ):
        block = cfg.pop(legacy, None)  # gone after verl's migration, set or not
        if isinstance(block, Mapping) and any(v is not None for v in block.values()):
            reward[new] = dict(block)
    rm = cfg.get("reward_model")
    if isinstance(rm, Mapping):
        manager = dict(reward.get("reward_manager") or {})
        if rm.get("reward_manager") is not None:
            manager["name"] = rm["reward_manager"]
        if rm.get("reward_loop_module_path") is not None:
            manager["module"] = {**dict(manager.get("module") or {}), "path": rm["reward_loop_module_path"]}
        if manager:
            reward["reward_manager"] = manager
        if rm.get("reward_kwargs") is not None:
            reward["reward_kwargs"] = rm["reward_kwargs"]
        cfg.pop("reward_model")
    if reward:
        cfg["reward"] = reward
    return cfg


def reward_section(verl_config: Any) -> RewardConfig:
    """The rewardhub ``reward:`` section for a verl config: from the rewardhub YAML named by
    ``reward.reward_manager.module.path``, else migrated from verl's own reward keys."""
    from .config import load_plan
    from .config.loader import resolve_or_explain
    from .config.schema import validate_reward
    from .config.shim import migrate
    from .errors import UsageError

    cfg = _legacy_applied(dict(resolve_or_explain(verl_config, "verl config") or {}))
    verl_reward = cfg.get("reward") or {}
    module = ((verl_reward.get("reward_manager") or {}).get("module") or {}).get("path")
    if module and str(module).endswith((".yaml", ".yml")):
        fn = (verl_reward.get("custom_reward_function") or {}).get("path")
        if fn:
            raise UsageError(
                f"reward.custom_reward_function.path={fn!r} and reward.reward_manager.module.path="
                f"{module!r} both name the rewards\nkeep one: put the function in the YAML as a term "
                f"({{path: {fn}, function: ...}}), or drop the module.path"
            )
        return _zero_on_failure(load_plan(str(module)).reward)
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
    kept = {k: v for k, v in section.items() if k in ("rewards", "aggregation", "sandbox", "plugins")}
    return _zero_on_failure(validate_reward(kept))


def _zero_on_failure(section: RewardConfig) -> RewardConfig:
    """verl cannot leave a sample out of its batch, and a NaN reward would poison its group's advantages:
    a term that names no ``on_failure`` of its own scores a failed call 0.0 here (flagged in
    ``rewardhub_failed``), where rewardhub's own default is NaN."""
    return dataclasses.replace(
        section,
        rewards=tuple(
            t if t.on_failure is not None else dataclasses.replace(t, on_failure="zero")
            for t in section.rewards
        ),
    )


#: what a sample without a ground truth gets from the rewards that need one (as ``rewardhub score`` says)
NO_GROUND_TRUTH = "no ground truth in this row (reward_model.ground_truth), which this reward needs"


class VerlBatchScorer:
    """Scores verl batches with a Runner built from a verl config (see the module's text).

    :ivar scored: samples scored so far. :ivar failed: those of them flagged ``rewardhub_failed``.
    """

    def __init__(self, verl_config: Any, reward_fn_key: str = "data_source") -> None:
        from .datasets import terms_needing
        from .execution import RoutingWatch
        from .execution import Runner

        self.reward_fn_key = reward_fn_key
        self.runner = Runner.from_config(reward_section(verl_config))
        self.names = [t.name for t in self.runner.terms]
        self.policies = {t.name: t.policy.on_failure for t in self.runner.terms}
        self.needing = terms_needing(self.runner)
        self.scored = 0
        self.failed = 0
        self._extra_keys: dict[str, None] = {}  # every extra key seen so far, in order (filled on every row)
        self.watch = RoutingWatch({t.name: t.routes for t in self.runner.terms})  # a term applied to none
        atexit.register(self.runner.close)

    # ---- DataProto -> samples ---------------------------------------------------------------
    def samples(self, data: Any, tokenizer: Any) -> list[dict[str, Any]]:
        """One rewardhub sample per row of a ``DataProto``, decoded as verl's managers decode."""
        return self.samples_of([data], tokenizer)

    def samples_of(self, parts: Sequence[Any], tokenizer: Any) -> list[dict[str, Any]]:
        """The samples of several ``DataProto`` (each row once, in order), decoded in one call."""
        from ._verl_batch import VerlBatchError
        from ._verl_batch import decode_samples

        # verl's scorer picks its function by data source
        by_source = VERL_DEFAULT_TERM["alias"] in self.names
        for data in parts:
            nt = data.non_tensor_batch if data.non_tensor_batch is not None else {}
            if by_source and len(data) and self.reward_fn_key not in nt:
                raise VerlBatchError(
                    f"verl batch has no non_tensor_batch[{self.reward_fn_key!r}], by which verl's default "
                    "scorer "
                    f"picks its function\nfields there: {sorted(nt) or 'none'}; or name a "
                    "reward.custom_reward_function"
                )
        if self.needing:
            for data in parts:
                nt = data.non_tensor_batch if data.non_tensor_batch is not None else {}
                if len(data) and "reward_model" not in nt:
                    raise VerlBatchError(
                        "verl batch has no non_tensor_batch['reward_model'] (reward_model.ground_truth), "
                        "which "
                        f"{', '.join(map(repr, self.needing))} needs\nfields there: {sorted(nt) or 'none'}; "
                        "verl's datasets carry it as reward_model: {ground_truth: ...}"
                    )
        return decode_samples(parts, tokenizer, self.reward_fn_key)

    # ---- scoring ------------------------------------------------------------------------------
    def score(self, samples: Sequence[Mapping[str, Any]]) -> tuple[list[float], list[dict[str, Any]]]:
        """(reward per sample, ``reward_extra_info`` per sample)."""
        from .errors import RewardExecutionError

        samples = list(samples)
        missing = {i for i, s in enumerate(samples) if self.needing and s.get("ground_truth") is None}
        if missing:
            first = self.needing[0]
            if self.policies[first] == "raise":
                raise RewardExecutionError(f"reward {first!r} on sample {min(missing)}: {NO_GROUND_TRUTH}\n"
                                           f"(on_failure: raise for reward {first!r})", reward=first,
                                           index=min(missing))
        ok = [i for i in range(len(samples)) if i not in missing]
        res = self.runner.score([samples[i] for i in ok]) if ok else None
        if res is not None:
            self.watch.see(res.columns)
        one = len(self.names) == 1
        rows: list[tuple[float, dict[str, Any]]] = []
        where = {i: k for k, i in enumerate(ok)}
        for i in range(len(samples)):
            info: dict[str, Any] = {}
            if i in missing:
                total: float | None = _failure_value(self.policies[self.needing[0]])
                errors = {n: NO_GROUND_TRUTH for n in self.needing}
                values: Mapping[str, Any] = {}
            else:
                assert res is not None
                k = where[i]
                total, errors, values = res.scores[k], res.errors[k], res.rewards[k]
                for name in self.names:
                    for key, v in (res.extra[k].get(name) or {}).items():
                        info[key if one and key not in ("score", name) else f"{name}/{key}"] = v
            reward = 0.0 if total is None else float(total)
            row: dict[str, Any] = {"score": reward, "acc": None if errors else reward}
            for name in self.names:
                value = values.get(name)
                row[name] = math.nan if value is None else value
            row.update(info)
            row["rewardhub_failed"] = 1.0 if errors else 0.0
            row["rewardhub_error"] = "; ".join(errors.values())
            self._extra_keys.update(dict.fromkeys(info))
            rows.append((reward, row))
        self.scored += len(rows)
        self.failed += sum(1 for _, r in rows if r["rewardhub_failed"])
        infos = []
        for _, row in rows:  # every extra key on every row: verl stacks the keys of its first row
            for key in self._extra_keys:
                row.setdefault(key, None)
            infos.append(row)
        return [r for r, _ in rows], infos


def _failure_value(on_failure: str) -> float | None:
    return math.nan if on_failure == "nan" else 0.0


def _reward_tensor(data: Any, scores: list[float]) -> Any:
    """verl's token-level reward: each sample's score on its last valid response token."""
    import torch

    from ._verl_batch import response_lengths

    lengths = torch.tensor(response_lengths(data), dtype=torch.long)
    out = torch.zeros_like(data.batch["responses"], dtype=torch.float32)
    rows = torch.arange(out.shape[0], device=out.device)
    out[rows, (lengths.to(out.device) - 1).clamp(min=0)] = out.new_tensor(scores)
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
                parts = [d for d, _ in pending]
                loop = asyncio.get_running_loop()
                # the decode too runs off the event loop (as naive's does), which meanwhile gathers the next
                # group
                scores, infos = await loop.run_in_executor(
                    None, lambda: self.scorer.score(self.scorer.samples_of(parts, self.tokenizer)))
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
