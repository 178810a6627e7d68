"""The module verl's ``verl.plugins`` entry point named before :mod:`rewardhub.verl.managers` (an install
made before still loads it): importing it registers the same managers."""

from __future__ import annotations

from .verl.managers import MANAGER_NAME
from .verl.managers import VerlBatchScorer
from .verl.managers import register

__all__ = ["MANAGER_NAME", "VerlBatchScorer", "register"]
