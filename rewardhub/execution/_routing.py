"""Routing said out loud: a term that applied to none of the rows it was given gets one WARNING line.

A routed reward (``data_sources`` / ``tags``, the reward's own or the config's) on rows that match none
of its routes scores nothing: every row's value is ``None``. :class:`RoutingWatch` counts, per term,
the rows seen and the rows the term applied to, and says so once per term when it has applied to none
(``score`` at the end of the run; the trainer's driver, the TRL and verl adapters as batches come, once
per run or process).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from collections.abc import Mapping
from typing import Any

from ._columns import Column
from ._outcome import NOT_APPLICABLE

__all__ = ["RoutingWatch", "config_routes", "not_applied_line", "say_warning"]


def say_warning(line: str) -> None:
    """``WARNING: line`` on stderr."""
    print(f"WARNING: {line}", file=sys.stderr, flush=True)


def not_applied_line(name: str, routes: str, rows: int, so_far: bool = False) -> str:
    """Why term ``name`` gave no score to any of ``rows`` rows, and what to do about it."""
    of = f"0 of {rows} rows{' so far' if so_far else ''}"
    if routes:
        return (f"reward {name!r} applied to {of}: it is routed to {routes}, and no row matched, so it "
                "scored none of them (null); give rows a matching data_source, or turn its routing "
                "off with data_sources: [] in its config term")
    return (f"reward {name!r} applied to {of}: it returned None (not applicable) for every row, so it "
            "scored none of them (null)")


class RoutingWatch:
    """Counts per term the rows seen and those it applied to; warns once per term that applied to none.

    :param routes: term name -> its routes in words (``""``: unrouted); a callable is asked only
        when a warning is due (where working the routes out costs something).
    :param say: where a warning goes (default: a ``WARNING:`` line on stderr).
    """

    def __init__(self, routes: Mapping[str, str] | Callable[[str], str],
                 say: Callable[[str], None] = say_warning, *, so_far: bool = True) -> None:
        self._routes = routes
        self._say = say
        self._so_far = so_far
        self.seen: dict[str, int] = {}
        self.applied: dict[str, int] = {}
        self.warned: set[str] = set()

    def see(self, columns: Mapping[str, Column]) -> list[str]:
        """Count one batch's columns; the warnings said now (at most one per term, ever)."""
        return self.see_counts({
            name: (len(col), len(col) - sum(1 for s in col.status.values() if s == NOT_APPLICABLE))
            for name, col in columns.items()
        })

    def see_counts(self, counts: Mapping[str, tuple[int, int]]) -> list[str]:
        """:meth:`see` for counts: term -> (rows it was given, rows it applied to)."""
        said = []
        for name, (n, applied) in counts.items():
            if not n:
                continue
            self.seen[name] = self.seen.get(name, 0) + n
            self.applied[name] = self.applied.get(name, 0) + applied
            if self.applied[name] or name in self.warned:
                continue
            self.warned.add(name)
            line = not_applied_line(name, self._route_of(name), self.seen[name], self._so_far)
            self._say(line)
            said.append(line)
        return said

    def _route_of(self, name: str) -> str:
        if callable(self._routes):
            try:
                return self._routes(name)
            except Exception as exc:  # the routes are only for the message: never fail a batch over them
                return f"(its routes could not be read: {type(exc).__name__})"
        return self._routes.get(name, "")


def config_routes(reward_cfg: Any) -> Callable[[str], str]:
    """Term name -> its routes, for a ``reward:`` section (the registry is read only when asked)."""

    def routes(name: str) -> str:
        from ..config.schema import validate_reward
        from ..registry import get_registry
        from ._terms import resolve_term

        registry = get_registry()
        for i, t in enumerate(validate_reward(reward_cfg).rewards):
            term = resolve_term(registry, t, i)  # the routes as the runner applies them
            if term.name == name:
                return term.routes
        return ""

    return routes

