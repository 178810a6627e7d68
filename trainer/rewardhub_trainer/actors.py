"""The run's processes: rollouter, reward client (of the reward workers), learner and the bounded message
queue.

Each is a plain class (testable without Ray) that :mod:`rewardhub_trainer.loop` wraps with
``ray.remote``. Only plain data crosses between them: prompt batches and :class:`Rollout` records
tagged with the policy version that produced them (defined in :mod:`rewardhub_trainer.rollouts`),
weight dicts, and the ``reward:`` config. The reward client is defined in
:mod:`rewardhub_trainer.reward_client`; it and the two records are re-exported here. Each process's
``info()`` says where it runs (:func:`rewardhub.distributed.process_location`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections import deque
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from rewardhub.distributed import process_location

from .config import DataConfig
from .config import LearnerSettings
from .config import RolloutConfig
from .cores import busy as _busy
from .cores import share_for as _share
from .reward_client import RewardClient
from .rollouts import PromptBatch
from .rollouts import Rollout

__all__ = ["Learner", "MessageQueue", "PromptBatch", "RewardClient", "Rollout", "Rollouter"]


def _set_threads(threads: int) -> None:
    import torch

    if threads > 0:
        torch.set_num_threads(threads)
        with contextlib.suppress(RuntimeError):  # already set in this process
            torch.set_num_interop_threads(1)


class Rollouter:
    """Formats prompts, samples ``n`` completions each with the current policy version."""

    def __init__(self, model_path: str, rollout: RolloutConfig, data: DataConfig, *,
                 dtype: str = "auto", device: str = "auto", threads: int = 0, seed: int = 0,
                 cores: tuple[str, int, int, str] | None = None) -> None:
        """``rollout`` and ``data``: the run's typed sections, as the driver parsed them (the
        evaluator's ``rollout`` has its ``val_n`` / ``val_temperature`` in place). ``cores``: (run token,
        slot, slots, lend mode) of the node's :mod:`~rewardhub_trainer.cores` board."""
        from .devices import choose
        from .engine import VLLM_KEYS
        from .engine import make_engine

        _set_threads(threads)
        self.rollout = rollout
        self.template = data.template
        self.instruction = data.instruction
        self.system = data.system
        self.seed = seed
        self.choice = choose(device, "none", "float32", dtype)
        self.engine = make_engine(
            rollout.engine,
            model_path,
            dtype=self.choice.rollout_dtype,
            device=self.choice.device,
            rollout={k: getattr(rollout, k) for k in VLLM_KEYS},
        )
        self.share = _share(cores, threads, self.choice.device, getattr(self.engine, "model", None))

    def info(self) -> dict[str, Any]:
        return {
            "role": "rollouter",
            **process_location(),
            "version": self.engine.version,
            "device": self.choice.device,
            "dtype": self.choice.rollout_dtype,
            "choice": self.choice,
            "ignored_generation_settings": dict(getattr(self.engine, "ignored_settings", {})),
        }

    def set_weights(self, state_dict: Any, version: int) -> int:
        """Load the learner's weights (:func:`~rewardhub_trainer.weights.pack`'s, or a dict of tensors)."""
        from .weights import unpack

        try:
            with _busy(self.share):
                self.engine.load_weights(unpack(state_dict), version)
        except BaseException:
            self.engine.version = -1  # the weights may be half loaded: this engine matches no version
            raise
        return version

    def generate(self, batch: PromptBatch, want_version: int | None = None) -> Rollout | int:
        """Sample the batch, or return the version it holds when that is not ``want_version``.

        A rollouter restarted by Ray holds the base weights, and one whose last weight load failed
        holds none it can name: it answers with its version instead of generating, so the driver
        sends it the current weights first (calls on one actor run in order).
        """
        if want_version is not None and self.engine.version != want_version:
            return int(self.engine.version)
        with _busy(self.share) as used:
            rollout = self._generate(batch)
        rollout.threads = used.get("threads", 0.0)
        return rollout

    def _generate(self, batch: PromptBatch) -> Rollout:
        t0 = time.perf_counter()
        texts = [
            p.text or self.engine.format_prompt(p.question + self.instruction, self.template, self.system)
            for p in batch.prompts
        ]  # p.text: rendered by the driver (data.render)
        version = self.engine.version
        r = self.rollout
        stops = {k: list(getattr(r, k)) for k in ("stop", "stop_token_ids") if getattr(r, k)}
        groups = self.engine.generate(
            texts, n=r.n, max_new_tokens=r.max_new_tokens, temperature=r.temperature, top_p=r.top_p,
            seed=self.seed * 1_000_003 + batch.index, top_k=max(0, r.top_k), **stops)
        return Rollout(batch=batch, version=version, groups=groups,
                       gen_s=time.perf_counter() - t0, rollouter_pid=os.getpid())


class Learner:
    """GRPO learner: advantages per group, one optimizer step per batch (per PPO epoch).

    With ``peers`` (the Ray options of ranks 1..N-1) it is rank 0 of ``trainer.num_learners``
    data-parallel ranks (:mod:`rewardhub_trainer.ddp`): it starts them, splits each batch between
    them by whole groups, and answers for the group; ``rank`` is set on the ranks it starts.
    """

    def __init__(
        self,
        model_path: str,
        settings: LearnerSettings,
        *,
        seed: int = 0,
        threads: int = 0,
        scale_advantages: bool = True,
        init_from: str | None = None,
        peers: Sequence[Mapping[str, Any]] = (),
        rank: tuple[str, int, int, int] | None = None,
        cores: tuple[str, int, int, str] | None = None,
    ) -> None:
        """``cores``: as the :class:`Rollouter`'s (a single learner only: data-parallel ranks keep their
        threads)."""
        from .devices import check_learner_gpus
        from .devices import choose
        from .learner import GRPOLearner

        world = len(peers) + 1 if peers else (rank[3] if rank else 1)
        _set_threads(max(1, threads // world) if threads else 0)  # the ranks share the node's cores
        # (a rank given no GPU sees none)
        self.choice = choose(settings.device, settings.autocast, settings.dtype, "float32")
        self.rank, self.world = (rank[2] if rank else 0), world
        self.peers: list[Any] = []
        self.loaded_from: str | None = init_from
        # the driver stops the run with it: one ERROR line
        self.error = check_learner_gpus(self.choice.device)
        if self.error is not None and rank is not None:  # a rank started by rank 0: its constructor's error
            raise RuntimeError(self.error)
        if self.error is not None:
            return
        asked = settings
        settings = dataclasses.replace(settings, device=self.choice.device, autocast=self.choice.autocast,
                                       dtype=self.choice.model_dtype)
        group = None
        if peers or rank:
            from .ddp import Group
            from .ddp import rendezvous
            from .ddp import start_ranks

            if peers:  # rank 0: the others meet it on its node
                addr, port = rendezvous()
                self.peers = start_ranks(
                    Learner,
                    peers,
                    addr,
                    port,
                    model_path,
                    asked,
                    seed=seed,
                    threads=threads,
                    scale_advantages=scale_advantages,
                    init_from=init_from,
                )
                rank = (addr, port, 0, world)
            assert rank is not None
            group = Group(*rank, device=self.choice.device)
        self.impl = GRPOLearner(model_path, settings, seed=seed, group=group)
        self.scale = scale_advantages
        if init_from:
            self.impl.load(init_from)
        self.share = _share(cores if world == 1 else None, threads, self.choice.device, self.impl.model)

    def info(self) -> dict[str, Any]:
        where = {"role": "learner", **process_location(), "rank": self.rank, "world": self.world}
        if self.error is not None:
            return {**where, "error": self.error}
        dtype = self.choice.model_dtype + ("+bf16 autocast" if self.choice.autocast == "bfloat16" else "")
        return {**where, "version": self.impl.version, "loaded_from": self.loaded_from,
                "device": self.choice.device, "dtype": dtype, "choice": self.choice}

    def ranks(self) -> list[dict[str, Any]]:
        """The :meth:`info` of the other ranks (none for a single learner)."""
        import ray

        return list(ray.get([p.info.remote() for p in self.peers], timeout=600))

    def load(self, path: str) -> int:
        """Continue from the checkpoint at ``path`` (after a restart); returns its policy version."""
        if self.peers:
            from .ddp import lead

            lead(lambda: self.impl.load(path), [p.load.remote(path) for p in self.peers])
        else:
            self.impl.load(path)
        self.loaded_from = path
        return self.impl.version

    def train(self, rollout: Rollout) -> dict[str, float]:
        with _busy(self.share) as used:
            stats = self._train(rollout)
        if "threads" in used:
            stats["threads/learner"] = used["threads"]
        return stats

    def _train(self, rollout: Rollout) -> dict[str, float]:
        import torch

        from .learner import TrainSample
        from .learner import group_advantages

        t0 = time.perf_counter()
        assert rollout.rewards is not None, "rollout was not scored"
        # float64: a reward of 1e39 is a finite number (float32 would make it inf, an invalid sample)
        matrix = torch.tensor(rollout.rewards, dtype=torch.float64)
        adv = group_advantages(matrix, scale=self.scale)
        valid = torch.isfinite(matrix)  # the others leave the update (learner.trained)
        groups = [
            [
                TrainSample(c.prompt_ids, c.response_ids, c.logprobs, float(adv[i, j]), bool(valid[i, j]))
                for j, c in enumerate(group)
            ]
            for i, group in enumerate(rollout.groups)
        ]
        if self.peers:
            from .ddp import lead
            from .ddp import split_groups

            shares = split_groups(groups, self.world)
            refs = [p.train_samples.remote(share) for p, share in zip(self.peers, shares[1:])]
            stats = lead(lambda: self.impl.train_step(shares[0]), refs)
        else:
            stats = self.impl.train_step([s for g in groups for s in g])
        stats["version"] = float(self.impl.version)
        stats["train_s"] = time.perf_counter() - t0
        return stats

    def train_samples(self, samples: list[Any]) -> dict[str, float]:
        """A rank's share of the batch (called by rank 0)."""
        return self.impl.train_step(samples)

    def get_weights(self) -> Any:
        """The weights for the rollouters, packed as numpy arrays (see :mod:`rewardhub_trainer.weights`)."""
        from .weights import pack

        # no copy of its own: Ray copies the arrays into its object store as this method returns,
        # before this (one call at a time) actor can start another update
        return pack(self.impl.state_dict(copy=False))

    def save(self, path: str) -> str:
        self.impl.save(path)  # the ranks hold the same weights and optimizer state: rank 0's are saved
        return path


class MessageQueue:
    """A bounded FIFO of scored rollouts; hands the learner only samples within the staleness bound.

    ``get(current_version)`` drops (and reports) every rollout whose version is more than
    ``staleness_limit`` behind ``current_version`` before returning the first fresh one.
    """

    def __init__(self, maxsize: int, staleness_limit: int) -> None:
        self.maxsize = maxsize
        self.staleness_limit = staleness_limit
        self._items: deque[Rollout] = deque()

    def put(self, rollout: Rollout) -> int:
        if len(self._items) >= self.maxsize:
            raise RuntimeError(f"message queue full ({self.maxsize}); the driver must apply backpressure")
        self._items.append(rollout)
        return len(self._items)

    def get(self, current_version: int) -> tuple[Rollout | None, list[dict[str, int]], int]:
        """The first fresh rollout (None: none left), the stale ones dropped, and the size left."""
        dropped = []
        while self._items:
            item = self._items.popleft()
            staleness = current_version - item.version
            if staleness > self.staleness_limit:
                dropped.append({"batch_index": item.batch.index, "version": item.version,
                                "staleness": staleness, "samples": item.num_samples})
                continue
            return item, dropped, len(self._items)
        return None, dropped, 0

    def drain(self) -> list[Rollout]:
        items = list(self._items)
        self._items.clear()
        return items
