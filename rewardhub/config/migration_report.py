"""What a migration of legacy keys did: :class:`MigrationReport`.

:func:`rewardhub.verl.shim.migrate` fills one in (and re-exports the class); the loader
(:mod:`rewardhub.config.loader`) keeps it with the loaded config, ``rewardhub migrate`` prints it, and
``train``/``check`` refuse a config with an unknown key through :meth:`MigrationReport.unknown_error`.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import Any

from ..deprecated import LEGACY_KEY_DROPPED
from ..deprecated import LEGACY_KEY_MOVED
from ..errors import RewardhubDeprecationWarning
from ..errors import UsageError

__all__ = ["KeyMoves", "MigrationReport", "put_key", "unknown_line"]


def unknown_line(entry: Mapping[str, Any]) -> str:
    """``unknown key K (not a key of verl's config); did you mean S?`` for one ``{"key", "suggestion"}``."""
    hint = f"; did you mean {entry['suggestion']}?" if entry.get("suggestion") else ""
    return f"unknown key {entry['key']} (not a key of verl's config){hint}"


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

    def add_unknown(self, key: str, value: Any, suggestion: str | None) -> None:
        """Record ``key`` as not a key of verl's config, with the closest one that is (the owner that
        found it knows the keys: it suggests)."""
        self.unknown.append({"key": key, "value": value, "suggestion": suggestion})

    def unknown_error(self) -> UsageError:
        """The ``unknown key`` error for :attr:`unknown` (``train`` and ``check`` refuse to run with one)."""
        return UsageError("\n".join([*map(unknown_line, self.unknown), "fix the spelling (verl's keys: "
                                      "verl/trainer/config/ppo_trainer.yaml), or remove it"]))


class KeyMoves:
    """One owner's pass over its legacy keys, recorded in ``report``: each key moved (:meth:`put`: two
    keys that set one new key must agree) or dropped with its reason, each with a deprecation warning in
    the owner's words (``moved_text`` / ``dropped_text``, formatted with ``old``, ``new``, ``value``,
    ``reason``)."""

    moved_text = LEGACY_KEY_MOVED
    dropped_text = LEGACY_KEY_DROPPED

    def __init__(self, report: MigrationReport) -> None:
        self.report = report
        #: new dotted key -> (value, the legacy key that set it)
        self.sets: dict[str, tuple[Any, str]] = {}
        #: a legacy key -> the other legacy keys that agree with it (each gets the same report line)
        self.also: dict[str, list[str]] = {}

    def moved(self, key: str, new: str) -> None:
        for k in (key, *self.also.pop(key, ())):
            self.report.moved.append({"from": k, "to": new})
            warnings.warn(self.moved_text.format(old=k, new=new), RewardhubDeprecationWarning, stacklevel=4)

    def dropped(self, key: str, reason: str, value: Any) -> None:
        for k in (key, *self.also.pop(key, ())):
            self.report.dropped.append({"key": k, "reason": reason, "value": value})
            warnings.warn(self.dropped_text.format(old=k, value=value, reason=reason),
                          RewardhubDeprecationWarning, stacklevel=4)

    def put(self, new: str, value: Any, key: str) -> None:
        """``key`` (of ``value``) moves to dotted ``new``; another key setting it otherwise is an error."""
        if new in self.sets and self.sets[new][0] != value:
            other_value, other = self.sets[new]
            raise UsageError(f"{other}={other_value!r} and {key}={value!r} both set {new} to different "
                             "values\nkeep one of them")
        self.sets[new] = (value, key)
        self.moved(key, new)


def put_key(cfg: dict[str, Any], dotted: str, value: Any, key: str, owner: str = "the new key") -> None:
    """Set ``dotted`` of ``cfg`` to ``value`` (moved there from ``key``), copying the mappings on the way;
    a different value already there is an error naming both (``dotted`` is ``owner``'s)."""
    *parents, last = dotted.split(".")
    node = cfg
    for k, p in enumerate(parents):
        nxt = {} if node.get(p) is None else node[p]
        if not isinstance(nxt, Mapping):
            raise UsageError(f"{key} moves to {dotted}, but {'.'.join(parents[:k + 1])}={nxt!r} is not a "
                             "mapping")
        node[p] = nxt = dict(nxt)
        node = nxt
    if last in node and node[last] != value:
        raise UsageError(f"{key}={value!r} and {dotted}={node[last]!r} are both set, to different values\n"
                         f"keep one of them ({dotted} is {owner})")
    node[last] = value
