"""Everything checked and built in the driver before Ray starts.

:func:`prepare` validates the trainer's sections, resolves every reward (unknown names fail
here, naming the key), materialises the model folder and loads the prompt dataset. It imports
neither Ray nor the actors, so a bad config fails fast and cheaply.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

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


def prepare(raw: Mapping[str, Any]) -> Prepared:
    """Validate ``raw`` (the result of :func:`rewardhub.config.load_config`) and build what a run needs."""
    from .models import materialize
    from .rewards import validate_rewards

    cfg = parse_config(raw)
    reward, fingerprint = validate_rewards(cfg.reward)
    cfg = dataclasses.replace(cfg, reward=reward)
    dataset = load_dataset(cfg.data)
    model_path = materialize(cfg.model)
    return Prepared(cfg=cfg, model_path=model_path, dataset=dataset, fingerprint=fingerprint)
