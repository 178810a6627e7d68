"""The ``reward:`` section's owner (:class:`~rewardhub.config.owners.SectionOwner`): verl's legacy
reward keys migrate into it, and verl launch scripts are read here."""

from __future__ import annotations

from typing import Any

from ..config.migration_report import MigrationReport
from ..config.owners import SectionOwner
from ..errors import UsageError
from .keys import roots

__all__ = ["ENTRY_KEY", "REWARD_OWNER", "read_launch_script"]

#: the top-level key the script reader sets to the verl entry point it found ({"module", "mode", "line"}),
#: for the trainer's owner (fully-async); the loader drops it once every owner has migrated
ENTRY_KEY = "__verl_entry_point__"


def _migrate(cfg: dict[str, Any], report: MigrationReport) -> dict[str, Any]:
    from .shim import migrate

    return migrate(cfg, report)[0]


def read_launch_script(text: str) -> dict[str, Any]:
    """A launch script's (or overrides file's) ``KEY=VALUE`` words as a config, with the verl entry point
    it runs under :data:`ENTRY_KEY`."""
    from ..config.overrides import apply_overrides
    from .scripts import read_script

    script = read_script(text)
    if not script.words and script.entry is None:
        raise UsageError("the file is neither YAML nor a script with KEY=VALUE overrides\n"
                         "pass a YAML file, or a launch script whose command has dotted overrides")
    data = apply_overrides({}, [w.text for w in script.words])
    if script.entry is not None:
        data[ENTRY_KEY] = script.entry
    return data


REWARD_OWNER = SectionOwner(
    name="rewardhub",
    sections=("reward",),
    migrate=_migrate,
    accounts_for=("custom_reward_function", "reward_model", "reward_manager", "sandbox_fusion"),
    knows=roots(),
    read_script=read_launch_script,
)
