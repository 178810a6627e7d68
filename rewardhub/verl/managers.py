"""verl reward managers that score whole batches through rewardhub's Runner.

A verl launch script selects them with one key::

    reward.reward_manager.name=rewardhub        # or the legacy reward_model.reward_manager=rewardhub

verl imports this module itself: rewardhub declares it under verl's ``verl.plugins`` entry-point
group, which ``import verl`` loads in every verl process (driver and Ray workers alike), and the
module registers the name ``rewardhub`` in both of verl 0.9's manager registries:

- the reward loop's (``verl.experimental.reward_loop.reward_manager``, verl 0.9's default):
  :class:`RewardhubLoopManager`. verl calls ``run_single`` once per sample (all of a worker's samples
  at once from ``compute_score_batch``, or one trajectory at a time from the agent loop); the
  manager gathers the calls that arrive together and scores them as one batch (one decode, one
  ``Runner.score``), then answers each call. Groups still scoring when the next arrive run side by
  side on the same Runner (its process pool takes concurrent callers);
- the batch managers' (``verl.workers.reward_manager``): :class:`RewardhubBatchManager`, whose
  ``__call__(data, return_dict)`` scores a whole ``DataProto``.

Which rewards: the launch script's own. ``reward.custom_reward_function`` (path, name,
reward_kwargs) becomes a rewardhub term through the config migration, and without one, verl's
default scorer (``verl.utils.reward_score.default_compute_score``, by data source) is the term: the
scores are verl's. ``reward.reward_manager.module.path`` may name a rewardhub YAML config instead
(its ``reward:`` section: several terms, weights, executors, timeouts); naming both is an error.
A config that still holds verl's legacy keys (``verl.experimental.reward_loop.migrate_legacy_reward_impl``
not called) is read as that function would migrate it: a set legacy ``custom_reward_function`` wins
over verl's defaults under ``reward.``. Either way the Runner's policies hold: process isolation and
timeouts, ``on_failure``, retries, metrics.

``reward_extra_info`` gets, per sample (the same keys on every sample, as verl stacks them):
``score`` (the reward verl gets), ``acc`` (as verl's ``naive`` manager gives it: the score, or the
reward's own ``acc``; None for a failed sample), each term's value under its name, the terms' extra
metrics (under their own keys for one term, ``term/key`` for several), ``rewardhub_failed`` (1.0
where a reward call failed or the sample could not be read, else 0.0: its mean is verl's
failure-rate metric) and ``rewardhub_error`` (the error text, "" if none). A failed sample's
``reward_score`` is what the term's ``on_failure`` says: ``zero`` 0.0 (the default here, unlike
rewardhub's own NaN: verl cannot leave a sample out, and NaN would poison its group), ``nan`` NaN,
``raise`` an error for that sample's trajectory (for the batch manager, its call), ``drop`` 0.0.
Each sample stands alone: one that cannot be read fails by itself, the others are scored.

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
