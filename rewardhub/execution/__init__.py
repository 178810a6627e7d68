"""Reward execution: terms, the runner and its executors, and how a batch's results are combined."""

from __future__ import annotations

from ._cachedisk import Disk
from ._cachedisk import stored_entry
from ._callers import CANCELLED
from ._callers import Cancel
from ._calls import check_sample
from ._calls import group_key
from ._calls import group_name
from ._columns import Column
from ._columns import column_metrics
from ._columns import stats
from ._facts import TermFacts
from ._facts import effective_executor
from ._facts import term_facts
from ._local import interrupts_told_apart
from ._outcome import ERROR
from ._outcome import NOT_APPLICABLE
from ._outcome import TIMEOUT
from ._outcome import Outcome
from ._outcome import noting_bools
from ._results import Scorer
from ._results import ScoreResult
from ._results import aggregate
from ._results import apply_on_failure
from ._results import apply_on_failure_to_outcomes
from ._results import check_aggregation
from ._results import combine
from ._results import failure_error
from ._routing import RoutingWatch
from ._routing import config_routes
from ._slowest import SlowestSamples
from ._stall import StallWatch
from ._terms import ExecutorFactory
from ._terms import RemoteExecutor
from ._terms import Term
from ._terms import resolve_term
from ._terms import resolve_terms
from ._terms import sandbox_settings
from ._where import debug_enabled
from .runner import Runner

__all__ = [
    "CANCELLED",
    "Cancel",
    "ERROR",
    "NOT_APPLICABLE",
    "TIMEOUT",
    "Column",
    "Disk",
    "ExecutorFactory",
    "Outcome",
    "RemoteExecutor",
    "RoutingWatch",
    "Runner",
    "ScoreResult",
    "Scorer",
    "SlowestSamples",
    "StallWatch",
    "Term",
    "TermFacts",
    "aggregate",
    "apply_on_failure",
    "apply_on_failure_to_outcomes",
    "failure_error",
    "check_aggregation",
    "check_sample",
    "column_metrics",
    "combine",
    "config_routes",
    "debug_enabled",
    "effective_executor",
    "group_key",
    "group_name",
    "interrupts_told_apart",
    "noting_bools",
    "resolve_term",
    "resolve_terms",
    "sandbox_settings",
    "stats",
    "stored_entry",
    "term_facts",
]
