"""The words of a shell script as :mod:`rewardhub.verl._shell` reads them, and where a ``${...}``
or a ``$(...)`` ends."""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field
from typing import Any

__all__ = ["Raw", "Script", "ShellWord", "Unsafe", "closing", "literal_head"]


@dataclass
class ShellWord:
    """One word as the command receives it: ``text``; ``raw`` is its span ``start:end`` in the script
    (shared by the words an unquoted expansion splits into: then ``whole`` is false)."""

    raw: str
    text: str
    start: int
    end: int
    command: int
    position: int
    line: int = 0
    whole: bool = True


@dataclass
class Script:
    """The override words a script hands to verl, and the entry point it runs (``None``: none found)."""

    words: list[ShellWord]
    entry: dict[str, Any] | None = None


class Unsafe(Exception):
    pass


@dataclass
class Raw:
    start: int
    end: int
    #: (kind, payload, quoted, after "=") with kind text | var | subst | unsafe | default | array
    parts: list[tuple[str, Any, bool, bool]] = field(default_factory=list)
    #: the element words of an array assignment ``NAME=(...)`` (its parts are ``NAME=``)
    items: list[Raw] | None = None


def closing(s: str, i: int) -> int:
    """The index after the ``}`` / ``)`` / backquote closing the ``${`` / ``$(`` / backquote at ``i``
    (``${X:-"${HOME}/a"}``: quotes and nesting respected); ``len(s)`` if none."""
    n = len(s)
    if s[i] == "`":
        j = i + 1
        while j < n and s[j] != "`":
            j += 2 if s[j] == "\\" else 1
        return min(j + 1, n)
    opener, close = ("${", "}") if s.startswith("${", i) else ("(", ")")
    depth, j = 0, i if opener == "${" else i + 1
    while j < n:
        c = s[j]
        if c == "\\":
            j += 2
        elif c == "'":
            j = s.find("'", j + 1) + 1 or n
        elif c == '"':
            j += 1
            while j < n and s[j] != '"':
                j = closing(s, j) if s.startswith(("${", "$("), j) else j + (2 if s[j] == "\\" else 1)
            j += 1
        elif s.startswith(opener, j):
            depth += 1
            j += len(opener)
        elif c == close and depth == 1:
            return j + 1
        else:
            depth -= c == close
            j += 1
    return n


def literal_head(raw: Raw) -> str:
    out = []
    for kind, payload, _, _ in raw.parts:
        if kind != "text":
            break
        out.append(payload)
    return "".join(out)
