"""Everything checked and built in the driver before Ray starts.

:func:`prepare` validates the trainer's sections, resolves every reward (unknown names fail
here, naming the key), materialises the model folder and loads the prompt datasets: each prompt is
rendered as the model will see it (chat template, ``data.max_prompt_length``), so a bad row fails
here, naming its file and row. It imports neither Ray nor the actors, so a bad config fails fast
and cheaply.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from dataclasses import dataclass
from dataclasses import field
from typing import Any

from rewardhub.config import RewardConfig

from .config import TrainConfig
from .config import parse_config
from .data import PromptDataset
from .data import load_dataset

__all__ = ["Prepared", "prepare"]


@dataclass
class Prepared:
    cfg: TrainConfig
    model_path: str
    dataset: PromptDataset
    fingerprint: str  #: the driver's registry fingerprint, compared with every worker's
    val_dataset: PromptDataset | None = None  #: data.val_files, rendered
    #: rows read and left out: {"train_rows", "train_filtered", "val_rows", "val_filtered"}
    data_report: dict[str, Any] = field(default_factory=dict)
    #: the driver's rewardhub.distributed.WorkerSetup: what the reward workers are checked against
    reward_setup: Any = None
    #: where the config took a value from the environment (:func:`rewardhub_trainer.runfolder.env_paths`)
    env_paths: dict[tuple[Any, ...], str] = field(default_factory=dict)
    #: the driver's provenance of each reward the config uses
    #: (:func:`rewardhub_trainer.rewards.used_rewards`), from the one registry the driver built; ``None`` with
    #: ``reward.remote`` (the server's, asked at the end)
    rewards: list[dict[str, Any]] | None = None
    #: ``reward.remote``: the server's identity of each of its terms (:func:`.rewards.remote_identities`)
    remote_identities: dict[str, str] | None = None

    def reward_identities(self) -> dict[str, str]:
        """Each reward the config uses -> what identifies its code (``dist==version``, or the ``sha256:``
        of a reward file; with ``reward.remote``, the server's terms'): a resumed run checks its
        checkpoint's against these."""
        if self.remote_identities is not None:
            return dict(self.remote_identities)
        setup = self.reward_setup
        if setup is None:
            return {}
        return {name: setup.driver_items[name] for name in setup.used if name in setup.driver_items}

    def public_config(self) -> dict[str, Any]:
        """The config as the run writes it: each value from an environment interpolation unresolved."""
        from .runfolder import public_config

        return public_config(self.cfg.to_dict(), self.env_paths)


def _needs_answer(reward: RewardConfig, registry: Any) -> list[str]:
    """The reward terms that take a ground truth (``registry``: the driver's, from
    :func:`validate_rewards`)."""
    from rewardhub.datasets import terms_needing
    from rewardhub.scorers import open_scorer
    from rewardhub.scorers import scores_remotely

    if scores_remotely(reward):  # the server's terms: rows without an answer get its error, per term
        return []
    with contextlib.closing(open_scorer(reward, registry=registry, check=False)) as scorer:
        return terms_needing(scorer)


def prepare(raw: Any) -> Prepared:
    """Validate ``raw`` and build what a run needs.

    :param raw: a :class:`rewardhub.config.ConfigPlan` (its typed ``reward:`` section is taken as it is),
        or a config mapping (``reward:`` validated here, by :func:`parse_config`).
    """
    from rewardhub.config import ConfigPlan
    from rewardhub.scorers import scores_remotely

    from .data import load_files
    from .data import render
    from .engine import check_engine
    from .models import load_tokenizer
    from .models import materialize
    from .rewards import nested_call_timeout
    from .rewards import remote_identities
    from .rewards import used_rewards
    from .rewards import validate_rewards
    from .runfolder import env_paths

    cfg = parse_config(raw)
    secrets = env_paths(raw.config if isinstance(raw, ConfigPlan) else raw)
    check_engine(cfg.rollout.engine)
    t = cfg.trainer
    # the bounds nest: a reward worker's call, its pool's tries, then the trainer's score call
    t = dataclasses.replace(t, call_timeout_s=nested_call_timeout(t.call_timeout_s, cfg.reward))
    workers = cfg.reward.workers.num_workers or t.num_reward_workers
    reward, reward_setup, registry = validate_rewards(
        cfg.reward, default_timeout_s=t.reward_timeout_s,
        chunk=math.ceil(cfg.samples_per_step / max(1, workers)), call_timeout_s=t.call_timeout_s,
    )
    cfg = dataclasses.replace(cfg, reward=reward, trainer=t)
    needs = _needs_answer(reward, registry) if (cfg.data.train_files or cfg.data.val_files) else []
    used = None if scores_remotely(reward) else used_rewards(reward, registry=registry)
    remote = remote_identities(used_rewards(reward)) if scores_remotely(reward) else None
    dataset = load_dataset(cfg.data, needs)
    val = PromptDataset(load_files(cfg.data.val_files, cfg.data, "data.val_files", needs),
                        seed=cfg.data.seed) if cfg.data.val_files else None
    model_path = materialize(cfg.model)
    tokenizer = load_tokenizer(model_path)
    report: dict[str, Any] = {"train_rows": len(dataset)}
    dataset, report["train_filtered"] = render(dataset, tokenizer, cfg.data, "data.train_files")
    if val is not None:
        report["val_rows"] = len(val)
        val, report["val_filtered"] = render(val, tokenizer, cfg.data, "data.val_files")
    if cfg.trainer.total_epochs:  # verl: the epochs over full batches set the number of steps
        steps = cfg.trainer.total_epochs * max(1, len(dataset) // cfg.rollout.prompts_per_step)
        cfg = dataclasses.replace(cfg, trainer=dataclasses.replace(cfg.trainer, total_steps=steps))
    return Prepared(
        cfg=cfg,
        model_path=model_path,
        dataset=dataset,
        fingerprint=reward_setup.driver_fingerprint,
        val_dataset=val,
        data_report=report,
        reward_setup=reward_setup,
        env_paths=secrets,
        rewards=used,
        remote_identities=remote,
    )

