"""Deeply frozen values for the typed sections: :class:`FrozenDict`, :func:`freeze` and :func:`thaw`.

A frozen section's mappings and lists are stored as :class:`FrozenDict` and tuples, so a section cannot be
changed in place and hashes; :func:`thaw` gives the plain dicts and lists back (what a run writes out, and
what a reward function is called with).
"""

from __future__ import annotations

from typing import Any
from typing import NoReturn
from typing import TypeVar

__all__ = ["FrozenDict", "freeze", "thaw"]

_K = TypeVar("_K")
_V = TypeVar("_V")


class FrozenDict(dict[_K, _V]):
    """A dict that cannot be changed after it is made, and hashes (its values must hash: see :func:`freeze`).

    A dict (not only a mapping) so that ``json``, ``**`` and ``isinstance(x, dict)`` take it as before; it
    pickles as a plain dict does, and is rebuilt frozen."""

    def _frozen(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError("a config section's mapping is frozen: build a new section (dataclasses.replace) "
                        "with a changed copy instead")

    __setitem__ = __delitem__ = __ior__ = _frozen
    clear = pop = popitem = setdefault = update = _frozen

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(frozenset(self.items()))

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (dict(self),))

    def __repr__(self) -> str:
        return f"FrozenDict({dict.__repr__(self)})"


def freeze(value: Any) -> Any:
    """``value`` with every mapping a :class:`FrozenDict` and every list a tuple, all the way down."""
    if isinstance(value, FrozenDict):
        return value
    if isinstance(value, dict):
        return FrozenDict({k: freeze(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """``value`` as plain data again: mappings are dicts and tuples are lists, all the way down."""
    if isinstance(value, dict):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [thaw(v) for v in value]
    return value
