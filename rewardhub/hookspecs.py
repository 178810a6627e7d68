"""Hook specifications: what a rewardhub plugin may implement."""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Any

import pluggy

if TYPE_CHECKING:
    from .types import RewardSpec

__all__ = [
    "hookimpl",
    "hookspec",
    "rewardhub_doctor_lines",
    "rewardhub_legacy_aliases",
    "rewardhub_register_rewards",
]

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

    A name that another installed source registers too is listed with status ``conflict``
    (both sources shown); only a config that uses the name fails, until it picks one with
    ``reward.plugins.prefer`` or blocks the other with ``reward.plugins.block``. A name this
    plugin returns twice is a :class:`~rewardhub.DuplicateRewardError`.

    Example::

        import rewardhub

        def shout(*, response, **kwargs):
            "1.0 for an upper-case response."
            return float(response.isupper())

        @rewardhub.hookimpl
        def rewardhub_register_rewards():
            return [shout, rewardhub.RewardSpec(name="shout_strict", target="my_pkg.rewards:shout")]

    .. versionadded:: 0.1
    """


@hookspec
def rewardhub_legacy_aliases() -> Mapping[str, str]:  # type: ignore[empty-body]
    """Return old reward names mapped to their current names.

    Called once per registry build, before any reward is registered. Only
    :meth:`RewardRegistry.get_reward` (and so a config term's ``name:``) follows an alias: an old name
    that no source registers itself resolves to the current reward's spec, with a
    ``RewardhubDeprecationWarning`` naming both names and the plugin that declared the alias. A name that
    is registered is never taken as an alias, and an alias whose current name is not registered is an
    unknown reward. ``rewardhub list``, ``has_reward`` and ``in`` know only registered names.

    Aliases from all plugins are merged in the order the plugins are called; when a later plugin maps
    an old name to another current name, that plugin is recorded as broken (``rewardhub list`` shows
    it, with the conflict) and its alias is ignored; its rewards are still registered. A plugin whose
    hook raises, or returns something other than a mapping of names, is recorded as broken the same way.

    Example::

        @rewardhub.hookimpl
        def rewardhub_legacy_aliases():
            return {"old_exact": "exact_answer"}  # configs naming old_exact get exact_answer, with a warning

    .. versionadded:: 0.1
    """


# -------------------------------------------------------------------------
# reports
# -------------------------------------------------------------------------


@hookspec
def rewardhub_doctor_lines(config: Any, nodes: Sequence[Mapping[str, Any]]) -> Sequence[str]:  # type: ignore[empty-body]
    """Return lines to add to ``rewardhub doctor``'s report.

    Called once per ``rewardhub doctor`` run in the driver, after every node was checked. ``config``
    is the whole loaded config (read-only; sections other than ``reward:`` are the plugin's to read),
    ``nodes`` the report's nodes, each a mapping with ``node_id``, ``ip``, ``is_head``, ``resources``
    (Ray's resource totals of the node), ``ok`` and ``problems``. A line containing ``PROBLEM`` makes
    ``doctor`` exit 1. This is how the trainer (``rewardhub-trainer``) reports where its learner,
    rollouters and reward workers would be placed, without the core importing it. A plugin whose call
    raises is named in a warning; the other plugins' lines are kept.

    Example::

        @rewardhub.hookimpl
        def rewardhub_doctor_lines(config, nodes):
            gpus = sum(n["resources"].get("GPU", 0) for n in nodes)
            return [f"my_trainer: {gpus:g} GPUs" + ("" if gpus else "  PROBLEM: it needs one")]

    .. versionadded:: 0.2
    """
