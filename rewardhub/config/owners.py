"""Who owns a config's top-level sections: the seam between the loader and the packages.

A :class:`SectionOwner` names the sections it owns, migrates its own legacy keys into them (writing to the
one :class:`~rewardhub.config.migration_report.MigrationReport`), names the foreign top-level keys it
accounts for (an empty one is left alone), and may read a file format (a launch script). The loader reads,
applies overrides, lets each owner migrate in turn, then checks the top-level keys against the owners'.

The core's own owner (the ``reward:`` section, with verl's legacy reward keys and launch scripts:
:mod:`rewardhub.verl.owner`) is built in; any other is an object named in the ``rewardhub.config_owners``
entry-point group (the trainer declares its own there), loaded after it, in name order.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .._targets import load_target
from .migration_report import MigrationReport

__all__ = ["BUILTIN_OWNERS", "ENTRY_POINT_GROUP", "SectionOwner", "check_sections", "installed_owners",
           "owned_sections"]

ENTRY_POINT_GROUP = "rewardhub.config_owners"
#: the core's owners, as ``module:attribute`` (imported when a config is loaded)
BUILTIN_OWNERS = ("rewardhub.verl.owner:REWARD_OWNER",)


@dataclass(frozen=True)
class SectionOwner:
    """The owner of some top-level sections of a config.

    :ivar name: who it is (``rewardhub``, ``rewardhub-trainer``), for messages.
    :ivar sections: the top-level sections it owns (checked by its own schema).
    :ivar migrate: ``(config, report) -> config``: its legacy keys moved into its sections, each recorded
        in ``report``; a new dict or ``config`` changed in place; keys it does not own left as they are.
    :ivar accounts_for: foreign top-level keys its migration consumes (one left empty is no error).
    :ivar knows: top-level keys of a format it reads that another owner migrates: a config with one and
        no owner accounting for it is refused with "no installed owner for ``key.*``".
    :ivar read_script: ``text -> config``: a launch script's settings (``None``: it reads none).
    """

    name: str
    sections: tuple[str, ...]
    migrate: Callable[[dict[str, Any], MigrationReport], dict[str, Any]]
    accounts_for: tuple[str, ...] = ()
    knows: tuple[str, ...] = ()
    read_script: Callable[[str], dict[str, Any]] | None = None


@functools.cache
def installed_owners() -> tuple[SectionOwner, ...]:
    """The built-in owners, then those of the ``rewardhub.config_owners`` entry points (cached; tests
    call ``installed_owners.cache_clear()``)."""
    from importlib.metadata import entry_points

    from ..errors import UsageError

    owners = [load_target(spec) for spec in BUILTIN_OWNERS]
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        owner = ep.load()
        if not isinstance(owner, SectionOwner):
            raise UsageError(f"entry point {ep.name} = {ep.value} ({ENTRY_POINT_GROUP}) is a "
                             f"{type(owner).__name__}, not a SectionOwner\nfix or uninstall its package")
        if owner.name not in {o.name for o in owners}:
            owners.append(owner)
    return tuple(owners)


def owned_sections(owners: Iterable[SectionOwner] | None = None) -> tuple[str, ...]:
    """Every top-level section an installed owner owns (``reward``, and the trainer's when installed)."""
    return tuple(s for o in (installed_owners() if owners is None else owners) for s in o.sections)


def check_sections(cfg: Mapping[str, Any], anchors: Callable[[], set[str]] = set,
                   owners: Iterable[SectionOwner] | None = None) -> None:
    """A top-level key no installed owner owns is an error, not silently ignored: a misspelt ``rewad:``
    is an unknown key; a section of a format an owner knows that no installed owner accounts for
    (``actor_rollout_ref:`` without the trainer) says so.

    A key whose value is a YAML anchor (``base: &b {weight: 1.0}``, reused as ``*b`` in a section)
    holds shared values, not a section: it is left as it is.

    :param anchors: the config file's top-level keys whose value is anchored (asked for only when
        a key is not a section: see :func:`anchor_holders`).
    :param owners: the owners to check against (default: the installed ones).
    :raises UsageError: ``unknown key rewad`` / ``did you mean reward?``, or ``no installed owner for
        `actor_rollout_ref.*```.
    """
    import difflib

    from ..errors import UsageError
    from .fields import unknown_key

    owners = tuple(installed_owners() if owners is None else owners)
    sections = owned_sections(owners)
    accounted = {k for o in owners for k in o.accounts_for}
    known = {k for o in owners for k in o.knows}
    holders: set[str] | None = None
    for key, value in cfg.items():
        if key in sections or (key in accounted and value in (None, {})):  # a foreign section left empty
            continue
        holders = anchors() if holders is None else holders
        if key in holders:
            continue
        if key in known and not difflib.get_close_matches(str(key), sections, n=1):
            raise UsageError(f"no installed owner for `{key}.*`\ninstall the package that owns these keys "
                             f"(verl's trainer keys: rewardhub-trainer), or remove them")
        raise unknown_key(str(key), sections)
