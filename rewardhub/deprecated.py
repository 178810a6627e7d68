"""Every deprecation message rewardhub emits, in one place (each a :class:`RewardhubDeprecationWarning`)."""

from __future__ import annotations

from typing import Final

__all__ = ["LEGACY_KEY_DROPPED", "LEGACY_KEY_MOVED", "REWARD_ALIAS"]

#: a legacy (verl-style) config key moved to the ``reward:`` schema
LEGACY_KEY_MOVED: Final = "legacy reward key {old} is deprecated: it is now {new}"
#: a legacy key with no meaning in rewardhub
LEGACY_KEY_DROPPED: Final = "legacy reward key {old}={value!r} is ignored: {reason}"
#: a config names a reward by an old name a plugin declared with ``rewardhub_legacy_aliases``
REWARD_ALIAS: Final = "reward name {old!r} is deprecated: it is now {new!r} (alias declared by {plugin})"
