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
where a reward call failed or the sample could not be read, else 0.0: its mean is verl's
failure-rate metric) and ``rewardhub_error`` (the error text, "" if none). A failed sample's
``reward_score`` is what the term's ``on_failure`` says: ``zero`` 0.0 (the default here, unlike
rewardhub's own NaN: verl cannot leave a sample out, and NaN would poison its group), ``nan`` NaN,
``raise`` an error for that sample's trajectory (for the batch manager, its call), ``drop`` 0.0.
Each sample stands alone: one that cannot be read fails by itself, the others are scored.

Importing this module without verl installed defines the plain helpers only.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import math
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from ._verl_config import VERL_DEFAULT_TERM
from ._verl_config import raise_per_row
from ._verl_config import reward_section
from .errors import RewardExecutionError

__all__ = ["MANAGER_NAME", "VerlBatchScorer", "register"]

_log = logging.getLogger("rewardhub.verl")

#: the name a launch script selects (``reward.reward_manager.name=rewardhub``)
MANAGER_NAME = "rewardhub"


class VerlBatchScorer:
    """Scores verl batches with a Runner built from a verl config (see the module's text).

    Every row stands alone: a row that cannot be read (a malformed field, no ground truth a reward
    needs) or whose reward failed gets its ``on_failure`` value, the error in ``rewardhub_error``
    and a logged warning naming it; ``on_failure: raise`` raises for that row only. The other rows
    get their scores.

    :ivar scored: samples scored so far. :ivar failed: those of them flagged ``rewardhub_failed``.
    """

    def __init__(self, verl_config: Any, reward_fn_key: str = "data_source") -> None:
        from .datasets import terms_needing
        from .execution import RoutingWatch
        from .execution import Runner

        self.reward_fn_key = reward_fn_key
        section = reward_section(verl_config)
        self.runner = Runner.from_config(raise_per_row(section))
        self.names = [t.name for t in self.runner.terms]
        self.policies = {t.name: str(c.on_failure) for t, c in zip(self.runner.terms, section.rewards)}
        self.needing = terms_needing(self.runner)
        #: the rewards needing a ground truth that are not verl functions: a row whose ground truth is
        #: None is not given to them (verl's functions get None, as verl's naive manager passes it)
        self.needing_native = [t.name for t in self.runner.terms
                               if t.name in self.needing and t.invoker.adapter != "verl"]
        self.scored = 0
        self.failed = 0
        self._extra_keys: dict[str, None] = {}  # every extra key seen so far, in order (filled on every row)
        self.watch = RoutingWatch({t.name: t.routes for t in self.runner.terms})  # a term applied to none
        atexit.register(self.runner.close)

    # ---- DataProto -> samples ---------------------------------------------------------------
    def read(self, parts: Sequence[Any], tokenizer: Any) -> tuple[list[Any], list[str]]:
        """The rows of several ``DataProto`` (each row once, in order, decoded in one call): a sample,
        or the :class:`~rewardhub._verl_batch.VerlBatchError` of a row that cannot be read; and labels."""
        from ._verl_batch import read_rows

        required = []
        if VERL_DEFAULT_TERM["alias"] in self.names:  # verl's scorer picks its function by data source
            required.append(self.reward_fn_key)
        if self.needing:
            required.append("reward_model")
        return read_rows(parts, tokenizer, self.reward_fn_key, required=required,
                         needs_ground_truth=bool(self.needing))

    # ---- scoring ------------------------------------------------------------------------------
    def score(self, samples: Sequence[Any], labels: Sequence[str] | None = None,
              ) -> tuple[list[float], list[dict[str, Any]]]:
        """(reward per sample, ``reward_extra_info`` per sample); raises the first row's error where a
        reward with ``on_failure: raise`` failed."""
        results = self.score_rows(samples, labels)
        for r in results:
            if isinstance(r, BaseException):
                raise r
        done = [r for r in results if not isinstance(r, BaseException)]
        return [score for score, _ in done], [info for _, info in done]

    def score_rows(
        self, rows: Sequence[Any], labels: Sequence[str] | None = None
    ) -> list[tuple[float, dict[str, Any]] | RewardExecutionError]:
        """Per row: (reward, ``reward_extra_info``), or the error to raise for that row alone
        (``on_failure: raise``). ``rows`` holds samples and the exceptions of rows not read."""
        from ._verl_batch import NO_GROUND_TRUTH

        rows = list(rows)
        labels = list(labels) if labels is not None else [f"row {i}" for i in range(len(rows))]
        unread: dict[int, dict[str, str]] = {}  # row -> {term: error}, for rows no reward is called on
        for i, r in enumerate(rows):
            if isinstance(r, BaseException):
                unread[i] = dict.fromkeys(self.names, str(r))
            elif self.needing_native and r.get("ground_truth") is None:
                unread[i] = dict.fromkeys(self.needing_native, NO_GROUND_TRUTH)
        ok = [i for i in range(len(rows)) if i not in unread]
        res = self.runner.score([rows[i] for i in ok]) if ok else None
        if res is not None:
            self.watch.see(res.columns)
        where = {i: k for k, i in enumerate(ok)}
        one = len(self.names) == 1
        out: list[tuple[float, dict[str, Any]] | RewardExecutionError] = []
        failures: list[str] = []
        for i in range(len(rows)):
            info: dict[str, Any] = {}
            values: Mapping[str, Any] = {}
            if i in unread:
                errors = unread[i]
                total: float | None = _failure_score([self.policies[n] for n in errors])
            else:
                assert res is not None
                k = where[i]
                total, errors, values = res.scores[k], res.errors[k], res.rewards[k]
                for name in self.names:
                    for key, v in (res.extra[k].get(name) or {}).items():
                        info[key if one and key not in ("score", name) else f"{name}/{key}"] = v
            raising = [n for n in errors if self.policies[n] == "raise"]
            if raising:
                out.append(RewardExecutionError(
                    f"verl row ({labels[i]}): {errors[raising[0]]}\n"
                    f"(on_failure: raise for reward {raising[0]!r}; use zero, nan or drop to go on)",
                    reward=raising[0], index=i))
                continue
            reward = 0.0 if total is None else float(total)
            if errors:
                failures.append(f"({labels[i]}) -> {reward}: {'; '.join(errors.values())}")
            row: dict[str, Any] = {"score": reward, "acc": None if errors else reward}
            for name in self.names:
                value = values.get(name)
                row[name] = math.nan if value is None else value
            row.update(info)
            row["rewardhub_failed"] = 1.0 if errors else 0.0
            row["rewardhub_error"] = "; ".join(errors.values())
            self._extra_keys.update(dict.fromkeys(info))
            out.append((reward, row))
        self.scored += len(rows)
        self.failed += len(rows) - len(ok) + sum(1 for k in ok if res is not None and res.errors[where[k]])
        if failures:
            more = f"; and {len(failures) - 3} more" if len(failures) > 3 else ""
            _log.warning("rewardhub: %d of %d verl rows not scored (their reward is on_failure's, flagged in "
                         "rewardhub_failed): %s%s", len(failures), len(rows),
                         "; ".join(f[:300] for f in failures[:3]), more)
        for r in out:  # every extra key on every row: verl stacks the keys of its first row
            if not isinstance(r, BaseException):
                for key in self._extra_keys:
                    r[1].setdefault(key, None)
        return out


def _failure_score(policies: Sequence[str]) -> float:
    """The reward of a row that no failed term scored: NaN where a term says ``nan``, else 0.0."""
    return math.nan if "nan" in policies else 0.0


def _reward_tensor(data: Any, scores: list[float]) -> Any:
    """verl's token-level reward: each sample's score on its last valid response token (on the first
    token of a row whose mask could not be read)."""
    import torch

    from ._verl_batch import row_lengths

    lengths = torch.tensor([n if isinstance(n, int) else 0 for n in row_lengths(data)], dtype=torch.long)
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
                # group; each trajectory gets its own result (a bad one fails alone)
                results = await loop.run_in_executor(
                    None, lambda: self.scorer.score_rows(*self.scorer.read(parts, self.tokenizer)))
            except BaseException as exc:  # noqa: BLE001 - every waiting call gets the failure
                for _, fut in pending:
                    if not fut.done():
                        fut.set_exception(exc)
                if not isinstance(exc, Exception):
                    raise
                return
            self.batches += 1
            self.batched_samples += len(pending)
            for (_, fut), result in zip(pending, results):
                if fut.done():
                    continue
                if isinstance(result, BaseException):
                    fut.set_exception(result)
                else:
                    fut.set_result({"reward_score": result[0], "reward_extra_info": result[1]})

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
            rows, labels = self.scorer.read([data], self.tokenizer)
            scores, infos = self.scorer.score(rows, labels)
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
