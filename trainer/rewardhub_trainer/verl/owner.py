"""The trainer's sections' owner (:class:`~rewardhub.config.owners.SectionOwner`), declared in the
``rewardhub.config_owners`` entry-point group: verl's cluster-size keys move into ``resources:``
(:mod:`.resources`), then verl's trainer keys into ``trainer``/``model``/``rollout``/``data``
(:mod:`.mapping`), into the loader's one report."""

from __future__ import annotations

from typing import Any

from rewardhub.config.migration_report import MigrationReport
from rewardhub.config.owners import SectionOwner

from .rules import SECTIONS
from .rules import VERL_ROOTS

__all__ = ["SECTIONS", "TRAINER_OWNER"]

def _migrate(cfg: dict[str, Any], report: MigrationReport) -> dict[str, Any]:
    from .mapping import map_verl_keys
    from .resources import migrate_resources

    cfg, _ = migrate_resources(cfg, report)
    map_verl_keys(cfg, report)
    return cfg


TRAINER_OWNER = SectionOwner(name="rewardhub-trainer", sections=SECTIONS, migrate=_migrate,
                             accounts_for=VERL_ROOTS)
