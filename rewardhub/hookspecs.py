"""Hook specifications: what a rewardhub plugin may implement."""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Any

import pluggy

if TYPE_CHECKING:
    from .types import RewardSpec

__all__ = ["hookimpl", "hookspec", "rewardhub_legacy_aliases", "rewardhub_register_rewards"]

#: marker for hook specifications
hookspec = pluggy.HookspecMarker("rewardhub")
#: marker plugins use for their implementations
hookimpl = pluggy.HookimplMarker("rewardhub")


# -------------------------------------------------------------------------
# registration
# -------------------------------------------------------------------------


@hookspec
def rewardhub_register_rewards() -> Sequence[RewardSpec | Any]:  # type: ignore[empty-body]
    """Return the rewards this plugin provides.

    Called once per registry build, in every process that builds a registry (the driver and
    each worker), after the built-in plugins and before the ``rewardhub.rewards`` entry points.
    Each item is a :class:`~rewardhub.RewardSpec`, or a module-level callable (optionally
    decorated with :func:`rewardhub.reward`), which is turned into a spec whose target is
    ``module:qualname``.

    A name returned twice, by this or any other source, is a
    :class:`~rewardhub.DuplicateRewardError` naming both sources.

    .. versionadded:: 0.1
    """


@hookspec
def rewardhub_legacy_aliases() -> Mapping[str, str]:  # type: ignore[empty-body]
    """Return old reward names mapped to their current names.

    Used by the config shim: a term that names an old reward is rewritten to the new name with
    a deprecation warning. Aliases from all plugins are merged; an alias that maps to two
    different names is an error.

    .. versionadded:: 0.1
    """
