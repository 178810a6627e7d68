"""The trainer's rewardhub plugin (entry point group ``rewardhub``): its lines in ``rewardhub doctor``.

Loaded wherever a registry is built, so it imports nothing heavy: the placement code is imported only
when ``doctor`` calls the hook with a training config.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

import rewardhub


@rewardhub.hookimpl
def rewardhub_doctor_lines(config: Any, nodes: Sequence[Mapping[str, Any]]) -> list[str]:
    """Where the learner, rollouters and reward workers of a training config (``resources:``) would go."""
    if "resources" not in config and "trainer" not in config:
        return []
    from .placement_doctor import doctor_lines

    return doctor_lines(config, nodes)
