"""Command-line overrides as users type them (``a.b=c``, Hydra's ``+a.b=c`` / ``++a.b=c`` / ``~a.b``).

:func:`parse_overrides` reads argv-style tokens (the shell has already removed its quotes);
:func:`is_override_word` tells an override among a launch script's words (which
:mod:`rewardhub.verl.scripts` splits and expands as a POSIX shell would).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from ..errors import UsageError

__all__ = [
    "Override",
    "apply_overrides",
    "format_value",
    "is_override_word",
    "leaves",
    "parse_override",
    "parse_overrides",
    "parse_value",
]

_KEY = r"[A-Za-z_][\w\-]*(?:\.[\w\-]+)*"
_OVERRIDE_RE = re.compile(rf"^(\+\+|\+|~)?({_KEY})(?:=(.*))?$", re.S)
_FLOW_KEY_RE = re.compile(r"([{,]\s*)([^\s:{}\[\],'\"]+):(?=\S)")
_INT_RE = re.compile(r"^[+-]?\d+$")
#: an OmegaConf interpolation without nested braces (``${oc.env:NAME}``, ``${oc.env:NAME,default}``)
_INTERPOLATION_RE = re.compile(r"\$\{[^{}]*\}")
_FLOAT_RE = re.compile(r"^[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?$")


@dataclass(frozen=True)
class Override:
    """One parsed override: ``op`` is ``=``, ``+``, ``++`` or ``~`` (delete)."""

    key: str
    value: Any
    op: str = "="
    text: str = ""


def _unquote(text: str) -> tuple[str, bool]:
    """Strip one pair of Hydra quotes; returns (text, was_quoted)."""
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        body = text[1:-1]
        q = text[0]
        return body.replace("\\" + q, q), True
    return text, False


def parse_value(text: str) -> Any:
    """Hydra's value grammar, the common part: quoted strings, null, booleans, numbers, [lists], {dicts}."""
    text = text.strip()
    body, quoted = _unquote(text)
    if quoted:
        return body
    low = text.lower()
    if text == "" :
        return ""
    if low in ("null", "~"):
        return None
    if low in ("true", "false"):
        return low == "true"
    if _INT_RE.match(text):
        return int(text)
    if _FLOAT_RE.match(text) or low in ("inf", "+inf", "-inf", "nan"):
        return float(text) if low != "nan" else math.nan
    if text[0] in "[{":
        # interpolations (``${oc.env:HOME}/a.parquet``) are items' text, as in Hydra: kept out of YAML's way
        interpolations: list[str] = []

        def hide(m: re.Match[str]) -> str:
            interpolations.append(m.group(0))
            return f"rhinterp{len(interpolations) - 1}x"

        hidden = _INTERPOLATION_RE.sub(hide, text)
        try:
            # Hydra writes {a:1} (also inside a list: [{a:1}]); YAML needs a space after a key's colon
            loaded = yaml.safe_load(_FLOW_KEY_RE.sub(r"\1\2: ", hidden))
        except yaml.YAMLError:
            return text
        return _convert_nested(loaded, interpolations)
    return text


def _convert_nested(x: Any, hidden: list[str]) -> Any:
    """A loaded ``[list]`` / ``{dict}``: its strings read by :func:`parse_value` too, with the
    interpolations it ``hidden`` put back."""
    if isinstance(x, list):
        return [_convert_nested(v, hidden) for v in x]
    if isinstance(x, dict):
        return {str(_unhide(k, hidden)): _convert_nested(v, hidden) for k, v in x.items()}
    return parse_value(_unhide(x, hidden)) if isinstance(x, str) else x


def _unhide(x: Any, hidden: list[str]) -> Any:
    if not hidden or not isinstance(x, str):
        return x
    return re.sub(r"rhinterp(\d+)x", lambda m: hidden[int(m.group(1))], x)


def format_value(value: Any) -> str:
    """An override's value text that :func:`parse_value` reads back as ``value``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        if value != "" and parse_value(value) == value and not re.search(r"[\s'\"\\,\[\]{}$`]", value):
            return value
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, list):
        return "[" + ",".join(format_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{k}:{format_value(v)}" for k, v in value.items()) + "}"
    return str(value)


def parse_override(token: str) -> Override:
    """Parse one override token (already shell-unquoted)."""
    m = _OVERRIDE_RE.match(token.strip())
    if not m:
        raise UsageError(
            f"override {token!r} is not valid\nexpected KEY=VALUE, +KEY=VALUE, ++KEY=VALUE or ~KEY "
            "(KEY dotted, e.g. reward.aggregation=weighted_sum)"
        )
    prefix, key, value = m.group(1) or "", m.group(2), m.group(3)
    if prefix == "~":
        return Override(key, None if value is None else parse_value(value), "~", token)
    if value is None:
        raise UsageError(f"override {token!r} has no value\nwrite {key}=VALUE (or ~{key} to delete it)")
    return Override(key, parse_value(value), prefix or "=", token)


def parse_overrides(tokens: Iterable[str]) -> list[Override]:
    """Parse argv-style override tokens; a token is one ``KEY=VALUE`` as the program receives it."""
    if isinstance(tokens, str):
        tokens = [tokens]
    return [parse_override(t) for t in tokens]


def is_override_word(text: str) -> bool:
    """Whether a shell word (unquoted) is a Hydra override of a dotted key (or a ``+``/``~`` one)."""
    m = _OVERRIDE_RE.match(text)
    if not m:
        return False
    prefix, key, value = m.group(1), m.group(2), m.group(3)
    if prefix == "~":
        return "." in key or value is None
    return value is not None and ("." in key or bool(prefix))


def leaves(node: Any, prefix: str = "", *, lists: bool = False) -> list[tuple[str, Any]]:
    """Every leaf of a nested config as ``(dotted key, value)``, in order: a non-empty mapping is a
    node, anything else a leaf (an empty mapping too); with ``lists``, so is a non-empty list of
    mappings (its items keyed by index: ``reward.rewards.0.name``)."""
    if isinstance(node, Mapping) and node:
        items = [(str(k), v) for k, v in node.items()]
    elif lists and isinstance(node, list) and node and all(isinstance(x, Mapping) for x in node):
        items = [(str(i), v) for i, v in enumerate(node)]
    else:
        return [(prefix, node)]
    out: list[tuple[str, Any]] = []
    for k, v in items:
        out.extend(leaves(v, f"{prefix}.{k}" if prefix else k, lists=lists))
    return out


def apply_overrides(config: Mapping[str, Any], overrides: Iterable[Override | str]) -> dict[str, Any]:
    """Return a copy of ``config`` with the overrides applied (intermediate mappings are created;
    a numeric segment indexes a list, and the index one past the end appends)."""
    import copy

    out: dict[str, Any] = copy.deepcopy(dict(config))
    for ov in overrides:
        if isinstance(ov, str):
            ov = parse_override(ov)
        parts = ov.key.split(".")
        node: Any = out
        for part, nxt in zip(parts, parts[1:]):
            slot = _slot(node, part, ov.key)
            if not isinstance(node[slot] if isinstance(node, list) else node.get(slot), (dict, list)):
                node[slot] = [] if nxt.isdigit() else {}
            node = node[slot]
        if ov.op == "~":
            _delete(node, parts[-1])
        else:
            node[_slot(node, parts[-1], ov.key)] = copy.deepcopy(ov.value)
    return out


def _slot(node: Any, part: str, key: str) -> Any:
    """Where ``part`` of override ``key`` is in ``node``: a key, or a list's index (one past its end
    appends)."""
    if not isinstance(node, list):
        return part
    if not part.isdigit() or int(part) > len(node):
        raise UsageError(f"override {key!r}: {part!r} is not an index of a list of {len(node)}")
    if int(part) == len(node):
        node.append(None)
    return int(part)


def _delete(node: Any, last: str) -> None:
    if isinstance(node, list):
        if last.isdigit() and int(last) < len(node):
            del node[int(last)]
    else:
        node.pop(last, None)
