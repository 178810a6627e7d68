"""The two reward managers :func:`rewardhub.verl.managers.register` puts in verl's registries (importing
this module imports verl)."""

from __future__ import annotations

import asyncio
from typing import Any

from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase
from verl.workers.reward_manager.abstract import AbstractRewardManager

from .scorer import VerlBatchScorer
from .scorer import lists
from .scorer import reward_tensor

__all__ = ["RewardhubBatchManager", "RewardhubLoopManager"]


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
        tensor = reward_tensor(data, scores)
        if return_dict:
            return {"reward_tensor": tensor, "reward_extra_info": lists(infos)}
        return tensor
