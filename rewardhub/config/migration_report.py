"""What a migration of legacy keys did: :class:`MigrationReport`.

:func:`rewardhub.verl.shim.migrate` fills one in (and re-exports the class); the loader
(:mod:`rewardhub.config.loader`) keeps it with the loaded config, ``rewardhub migrate`` prints it, and
``train``/``check`` refuse a config with an unknown key through :meth:`MigrationReport.unknown_error`.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field
from typing import Any

from ..errors import UsageError
from ..verl.keys import suggest
from ..verl.keys import unknown_line

__all__ = ["MigrationReport"]


@dataclass
class MigrationReport:
    """What :func:`migrate` did: ``moved`` ``{"from", "to"}`` pairs and ``dropped`` ``{"key", "reason",
    "value"}`` entries (the value, so that nothing is lost); ``notes`` explain choices made; ``unknown``
    ``{"key", "value", "suggestion"}``: keys under verl's sections that verl itself does not have (a
    misspelling: an error for ``train``/``check``, a warning for ``migrate``)."""

    moved: list[dict[str, str]] = field(default_factory=list)
    dropped: list[dict[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    unknown: list[dict[str, Any]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.moved or self.dropped or self.unknown)

    def as_dict(self) -> dict[str, Any]:
        return {"moved": list(self.moved), "dropped": list(self.dropped), "notes": list(self.notes),
                "unknown": list(self.unknown)}

    def add_unknown(self, key: str, value: Any) -> None:
        """Record ``key`` as not a key of verl's config, with the closest one that is."""
        self.unknown.append({"key": key, "value": value, "suggestion": suggest(key) or suggest(key, 0.85)})

    def unknown_error(self) -> UsageError:
        """The ``unknown key`` error for :attr:`unknown` (``train`` and ``check`` refuse to run with one)."""
        lines = [unknown_line(u) for u in self.unknown]
        return UsageError(
            lines[0]
            + "".join(f"\n{line}" for line in lines[1:])
            + "\nfix the spelling (verl's keys: verl/trainer/config/ppo_trainer.yaml), or remove it"
        )
