"""Reward execution: the runner, its executors and per-reward metrics."""

from __future__ import annotations

from ._outcome import Outcome
from ._process import ProcessPool
from .runner import Runner
from .runner import ScoreResult
from .runner import Term
from .runner import resolve_term

__all__ = ["Outcome", "ProcessPool", "Runner", "ScoreResult", "Term", "resolve_term"]
