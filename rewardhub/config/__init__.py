"""Configuration: the ``reward:`` schema, the legacy-key shim and the one loader.

The names below load on first use: the registry needs only the schema, and ``rewardhub list`` must not
pay for the loader (PyYAML, OmegaConf-style overrides) it does not call.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING
from typing import Any

if TYPE_CHECKING:
    from .loader import ConfigPlan
    from .loader import MigrationReport
    from .loader import load_config
    from .loader import load_plan
    from .overrides import parse_overrides
    from .schema import RewardConfig
    from .schema import TermConfig

_WHERE = {
    "ConfigPlan": "loader",
    "MigrationReport": "loader",
    "load_config": "loader",
    "load_plan": "loader",
    "parse_overrides": "overrides",
    "RewardConfig": "schema",
    "TermConfig": "schema",
}
__all__ = [
    "ConfigPlan",
    "MigrationReport",
    "RewardConfig",
    "TermConfig",
    "load_config",
    "load_plan",
    "parse_overrides",
]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
