"""rewardhub: a plugin registry and execution engine for the reward functions of LLM RL."""

from __future__ import annotations

from typing import Any

from .decorator import reward
from .errors import BrokenRewardError
from .errors import DuplicateRewardError
from .errors import Interrupted
from .errors import PluginLoadError
from .errors import RewardExecutionError
from .errors import RewardhubDeprecationWarning
from .errors import RewardhubError
from .errors import RewardhubWarning
from .errors import UnknownRewardError
from .errors import UsageError
from .hookspecs import hookimpl
from .hookspecs import hookspec
from .registry import RewardRegistry
from .registry import build_registry
from .registry import get_registry
from .types import ExecutionPolicy
from .types import RewardSpec

__all__ = [
    "BrokenRewardError",
    "DuplicateRewardError",
    "ExecutionPolicy",
    "Interrupted",
    "PluginLoadError",
    "RewardExecutionError",
    "RewardRegistry",
    "RewardSpec",
    "RewardhubDeprecationWarning",
    "RewardhubError",
    "RewardhubWarning",
    "UnknownRewardError",
    "UsageError",
    "__version__",
    "build_registry",
    "get_registry",
    "hookimpl",
    "hookspec",
    "reward",
]


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from .registry import core_version

        return core_version()
    raise AttributeError(f"module 'rewardhub' has no attribute {name!r}")
