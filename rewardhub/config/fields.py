"""The one validator of config sections, for the core's ``reward:`` and the trainer's sections alike.

A section's schema is a dataclass (its fields' annotations give the types) plus a table of
:class:`Rule` (allowed values, bounds) keyed by the field's path in the section, ``*`` standing for
a list item. :func:`check_section` checks a mapping against both and returns it converted (``"7"``
for an int is 7, ``"true"`` for a bool is True). Every error is a :class:`~rewardhub.errors.UsageError`
in one wording:

* a bad value: ``trainer.mode='asynk' is not valid`` (``: why`` where there is more to say), then
  the fix on the next line: ``allowed: sync, fully_async`` or ``expected a number``;
* an unknown key: ``unknown key trainer.totl_steps``, then ``did you mean trainer.total_steps?``
  where a key is close, and the allowed keys.

A number must be finite: ``nan`` is refused for every number, ``inf`` / ``-inf`` unless its rule says
``infinite=True`` (e.g. "no limit"), so ``trainer.lr=nan`` fails here, not deep in a run.

Nothing here imports more than the standard library.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import types
import typing
from collections.abc import Iterable
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError

__all__ = [
    "Rule",
    "above",
    "at_least",
    "between",
    "check_min_max",
    "check_section",
    "finite",
    "has_interpolation",
    "invalid",
    "one_of",
    "unknown_key",
]

_TYPE_WORDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def invalid(path: str, value: Any, fix: str, why: str = "") -> UsageError:
    """``path=value is not valid[: why]`` and, on the next line, ``fix`` (the allowed values, the way out)."""
    shown = "null" if value is None else repr(value)
    return UsageError(f"{path}={shown} is not valid{': ' + why if why else ''}\n{fix}")


def unknown_key(path: str, allowed: Iterable[str]) -> UsageError:
    """``unknown key a.b.c``, the closest allowed key, and every allowed key."""
    parent, _, key = path.rpartition(".")
    names = sorted(allowed)
    close = difflib.get_close_matches(key, names, n=1)
    hint = f"did you mean {parent + '.' if parent else ''}{close[0]}? " if close else ""
    return UsageError(f"unknown key {path}\n{hint}allowed: {', '.join(names)}")


@dataclass(frozen=True)
class Rule:
    """What one key's value may be, beyond its type: one of ``choices``, or within bounds."""

    choices: tuple[Any, ...] = ()
    minimum: float | None = None
    minimum_inclusive: bool = True
    maximum: float | None = None
    maximum_inclusive: bool = True
    #: why the bounds are what they are (shown after "is not valid: ")
    why: str = ""
    #: values allowed besides the bounds (``0`` that turns a feature off)
    also: tuple[float, ...] = ()
    #: ``inf`` / ``-inf`` are allowed (within the bounds); NaN never is
    infinite: bool = False

    def check(self, path: str, value: Any) -> None:
        if self.choices and value not in self.choices:
            shown = ", ".join(str(c) for c in self.choices if c is not None)
            raise invalid(path, value, f"allowed: {shown}", self.why)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return
        if math.isnan(value) or (math.isinf(value) and not self.infinite):
            raise invalid(path, value, f"allowed: {self.describe()}", "not a number" if math.isnan(value)
                          else "not a finite number")
        if value in self.also:
            return
        low = self.minimum is not None and (
            value < self.minimum or (value == self.minimum and not self.minimum_inclusive)
        )
        high = self.maximum is not None and (
            value > self.maximum or (value == self.maximum and not self.maximum_inclusive)
        )
        if low or high:
            raise invalid(path, value, f"allowed: {self.describe()}", self.why)

    def describe(self) -> str:
        """``a value >= 1``, ``a value > 0 and < 1``, ``a value > 1, or 0``, ``a finite number``."""
        parts = []
        if self.minimum is not None:
            parts.append(f"{'>=' if self.minimum_inclusive else '>'} {_num(self.minimum)}")
        if self.maximum is not None:
            parts.append(f"{'<=' if self.maximum_inclusive else '<'} {_num(self.maximum)}")
        text = "a value " + " and ".join(parts) if parts else "a finite number"
        if self.also:
            text += ", or " + " or ".join(_num(v) for v in self.also)
        if self.infinite:
            text += " (inf allowed)"
        return text


def _num(x: float) -> str:
    return str(int(x)) if math.isfinite(x) and float(x).is_integer() else str(x)


def one_of(*choices: Any, why: str = "") -> Rule:
    return Rule(choices=tuple(choices), why=why)


def at_least(minimum: float, why: str = "", *, also: tuple[float, ...] = ()) -> Rule:
    return Rule(minimum=minimum, why=why, also=also)


def above(minimum: float, why: str = "", *, also: tuple[float, ...] = ()) -> Rule:
    """``x > minimum`` (or one of ``also``: ``above(1, also=(0,))`` for "> 1, 0 turns it off")."""
    return Rule(minimum=minimum, minimum_inclusive=False, why=why, also=also)


def finite(why: str = "") -> Rule:
    """Any finite number (a reward's weight may be negative)."""
    return Rule(why=why)


def between(minimum: float, maximum: float, *, exclusive: bool = False, why: str = "") -> Rule:
    """``minimum <= x <= maximum`` (both ends excluded with ``exclusive``)."""
    return Rule(
        minimum=minimum,
        minimum_inclusive=not exclusive,
        maximum=maximum,
        maximum_inclusive=not exclusive,
        why=why,
    )


_type_hints = functools.cache(typing.get_type_hints)


def _split_optional(typ: Any) -> tuple[Any, bool]:
    """``(X, True)`` for ``Optional[X]`` / ``X | None``, else ``(typ, False)``."""
    if typing.get_origin(typ) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(typ) if a is not type(None)]
        if len(args) < len(typing.get_args(typ)):
            # a union built at run time from a tuple of members: no `X | Y` spelling for that
            return (args[0] if len(args) == 1 else typing.Union[tuple(args)]), True  # noqa: UP007
    return typ, False


def check_scalar(path: str, value: Any, typ: Any) -> Any:
    """``value`` converted to ``typ`` (int, float, str, bool, optional or not) the way a user means it."""
    base, optional = _split_optional(typ)
    if value is None:
        if optional or base is Any:
            return None
        raise invalid(path, value, f"expected {_TYPE_WORDS.get(base, base)}")
    if isinstance(value, str) and value.startswith("${"):
        return value  # an interpolation: checked when it resolves
    if base is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
    elif base in (int, float):
        if isinstance(value, bool):
            pass  # true is not 1 here
        elif base is float and isinstance(value, (int, float)):
            return float(value)
        elif isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
            return int(value)
        elif isinstance(value, str):
            try:
                return base(value)
            except ValueError:
                pass
    elif base is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
    else:
        return value
    raise invalid(path, value, f"expected {_TYPE_WORDS.get(base, base)}")


def has_interpolation(node: Any) -> bool:
    """Whether ``node`` is a ``DictConfig`` or holds a ``${...}`` string somewhere."""
    if type(node).__module__.startswith("omegaconf"):
        return True
    if isinstance(node, str):
        return "${" in node
    if isinstance(node, (Mapping, list, tuple)):
        return any(map(has_interpolation, node.values() if isinstance(node, Mapping) else node))
    return False


def check_min_max(section: Any, path: str, noun: str) -> None:
    """A checked section's ``max_<noun>`` is set and not below its ``min_<noun>`` (default 1)."""
    if section is None:
        return
    if dataclasses.is_dataclass(section):
        section = dataclasses.asdict(section)  # type: ignore[arg-type]
    low, top = section.get(f"min_{noun}", 1), section.get(f"max_{noun}")
    if top is None:
        raise UsageError(f"{path}.max_{noun} is not set\nset the most {noun} it may grow to, "
                         f"e.g. {path}: {{min_{noun}: 1, max_{noun}: 8}}")
    if isinstance(low, int) and isinstance(top, int) and low > top:
        raise UsageError(f"{path}: min_{noun}={low} is above max_{noun}={top}\nset min_{noun} <= max_{noun}")


def check_section(data: Any, cls: type, path: str, rules: Mapping[str, Rule] | None = None,
                  pattern: str = "") -> dict[str, Any]:
    """Check mapping ``data`` against dataclass ``cls``; the converted plain mapping.

    :param path: the section's full key path (``trainer``, ``reward.workers``), for the messages.
    :param rules: field path relative to the section (``*`` for a list item) -> its :class:`Rule`.
    :param pattern: ``data``'s own place in ``rules``' paths (``rewards.*`` for a reward term).
    :raises UsageError: in the one wording (see the module's doc).
    """
    rules = rules or {}
    fields = {f.name: f for f in dataclasses.fields(cls)}
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise invalid(path, data, f"expected a mapping with keys: {', '.join(sorted(fields))}")
    hints = _type_hints(cls)
    out: dict[str, Any] = {}
    for k, v in data.items():
        if k not in fields:
            raise unknown_key(f"{path}.{k}" if path else str(k), fields)
        sub, subpat = f"{path}.{k}" if path else str(k), f"{pattern}.{k}" if pattern else str(k)
        out[k] = _check_field(v, hints[k], sub, subpat, rules)
    return out


def _check_field(v: Any, typ: Any, sub: str, subpat: str, rules: Mapping[str, Rule]) -> Any:
    base, optional = _split_optional(typ)
    origin = typing.get_origin(base)
    if isinstance(base, type) and dataclasses.is_dataclass(base):
        return None if v is None and optional else check_section(v, base, sub, rules, subpat)
    if origin in (dict, Mapping):
        if v is None:
            return None if optional else {}
        if not isinstance(v, Mapping):
            raise invalid(sub, v, "expected a mapping")
        vtyp = typing.get_args(base)[1] if typing.get_args(base) else Any
        if vtyp is Any:
            return {str(kk): vv for kk, vv in v.items()}
        out = {str(kk): check_scalar(f"{sub}.{kk}", vv, vtyp) for kk, vv in v.items()}
        for kk, vv in out.items():  # a mapping's values: its rule under "key.*" (numbers: finite at least)
            _apply(rules.get(f"{subpat}.*"), f"{sub}.{kk}", vv)
        return out
    if origin in (list, tuple):  # a list in the config; a frozen section keeps it as a tuple
        if v is None:
            return None if optional else []
        if isinstance(v, str):
            v = [v]  # one item for a list of names
        if not isinstance(v, (list, tuple)):
            raise invalid(sub, v, "expected a list")
        item = typing.get_args(base)[0] if typing.get_args(base) else Any
        return [check_scalar(f"{sub}[{i}]", x, item) for i, x in enumerate(v)]
    value = check_scalar(sub, v, typ)
    _apply(rules.get(subpat), sub, value)
    return value


_FINITE = Rule()


def _apply(rule: Rule | None, path: str, value: Any) -> None:
    """``rule``'s check of ``value``; a number without a rule must still be finite."""
    if value is None or (isinstance(value, str) and value.startswith("${")):
        return
    (rule or _FINITE).check(path, value)
