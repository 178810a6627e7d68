"""Configuration: the ``reward:`` schema, the legacy-key shim and the one loader."""

from __future__ import annotations

from .loader import MigrationReport
from .loader import load_config
from .loader import load_config_with_report
from .overrides import parse_overrides
from .schema import RewardConfig
from .schema import TermConfig

__all__ = ["MigrationReport", "RewardConfig", "TermConfig", "load_config", "load_config_with_report",
           "parse_overrides"]
