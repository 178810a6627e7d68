"""What the legacy shim's test modules share: a quiet migrate, a dotted-path read."""

from __future__ import annotations

import warnings
from typing import Any

from rewardhub.errors import RewardhubDeprecationWarning
from rewardhub.verl.shim import migrate


def quiet_migrate(cfg: Any) -> tuple[dict[str, Any], Any, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        new, report = migrate(cfg)
    msgs = [str(w.message) for w in caught if issubclass(w.category, RewardhubDeprecationWarning)]
    return new, report, msgs


def get_path(cfg: dict[str, Any], dotted: str) -> Any:
    node: Any = cfg
    for part in dotted.replace("[", ".").replace("]", "").split("."):
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node
