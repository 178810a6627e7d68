"""Configuration: the ``reward:`` schema, the legacy-key shim and the one loader."""

from __future__ import annotations

from .loader import ConfigPlan
from .loader import MigrationReport
from .loader import load_config
from .loader import load_config_with_report
from .loader import load_plan
from .overrides import parse_overrides
from .schema import RewardConfig
from .schema import TermConfig

__all__ = [
    "ConfigPlan",
    "MigrationReport",
    "RewardConfig",
    "TermConfig",
    "load_config",
    "load_config_with_report",
    "load_plan",
    "parse_overrides",
]
