"""verl reward managers that score whole batches through rewardhub's Runner.

A launch script selects them with one key::

    reward.reward_manager.name=rewardhub        # or the legacy reward_model.reward_manager=rewardhub

verl imports this module itself (rewardhub declares it under verl's ``verl.plugins`` entry-point group,
which ``import verl`` loads in every verl process), and it registers the name ``rewardhub`` in both of
verl 0.9's manager registries: the reward loop's (:class:`~rewardhub.verl._classes.RewardhubLoopManager`,
which gathers the ``run_single`` calls that arrive together into one batch; batches still scoring when
the next arrive run side by side on one Runner) and the batch managers'
(:class:`~rewardhub.verl._classes.RewardhubBatchManager`, a whole ``DataProto`` per call). Which rewards
it scores, what ``reward_extra_info`` holds and what a failed or unreadable sample gets: docs/frameworks.md
(and :class:`~rewardhub.verl.scorer.VerlBatchScorer`).

Importing this module without verl installed defines the plain helpers only.
"""

from __future__ import annotations

from .scorer import MANAGER_NAME
from .scorer import VerlBatchScorer

__all__ = ["MANAGER_NAME", "VerlBatchScorer", "register"]

_registered = False


def register() -> bool:
    """Register :data:`MANAGER_NAME` in verl's reward-manager registries; False without verl.

    Called when this module is imported (verl imports it through its ``verl.plugins`` entry point).
    """
    global _registered
    if _registered:
        return True
    try:
        from verl.experimental.reward_loop.reward_manager import register as register_loop
        from verl.workers.reward_manager import register as register_batch

        from ._classes import RewardhubBatchManager
        from ._classes import RewardhubLoopManager
    except ImportError:
        return False
    _registered = True
    register_loop(MANAGER_NAME)(RewardhubLoopManager)
    register_batch(MANAGER_NAME)(RewardhubBatchManager)
    return True


register()
