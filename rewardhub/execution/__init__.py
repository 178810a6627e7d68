"""Reward execution: terms, the runner and its executors, and how a batch's results are combined."""

from __future__ import annotations

from ._calls import group_key
from ._outcome import Outcome
from ._process import ProcessPool
from ._results import AGGREGATIONS
from ._results import ScoreResult
from ._results import aggregate
from ._results import apply_on_failure
from ._results import apply_on_failure_to_outcomes
from ._results import check_aggregation
from ._results import combine
from ._terms import Term
from ._terms import config_value
from ._terms import plain
from ._terms import resolve_term
from ._terms import resolve_terms
from ._terms import sandbox_settings
from .runner import ExecutorFactory
from .runner import RemoteExecutor
from .runner import Runner

__all__ = [
    "AGGREGATIONS",
    "ExecutorFactory",
    "Outcome",
    "ProcessPool",
    "RemoteExecutor",
    "Runner",
    "ScoreResult",
    "Term",
    "aggregate",
    "apply_on_failure",
    "apply_on_failure_to_outcomes",
    "check_aggregation",
    "combine",
    "config_value",
    "group_key",
    "plain",
    "resolve_term",
    "resolve_terms",
    "sandbox_settings",
]
