"""The words of a shell script as :mod:`rewardhub.verl._shell` reads them, and where a ``${...}``
or a ``$(...)`` ends."""

from __future__ import annotations

import re
from dataclasses import dataclass
from dataclasses import field
from typing import Any

__all__ = ["Raw", "Script", "ShellWord", "Unsafe", "ansi_c", "brace_expansion", "closing", "literal_head"]


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


_ANSI_C = {"a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n", "r": "\r", "t": "\t",
           "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?"}


def ansi_c(s: str, i: int) -> tuple[str, int]:
    """The text of the ``$'...'`` whose ``$`` is at ``i`` (bash's ANSI-C quoting: ``\\n``, ``\\t``,
    ``\\x41``, ``\\101``, ``\\u00e9``, ``\\cA`` ...), and the index after its closing quote."""
    n, out, j = len(s), [], i + 2
    while j < n and s[j] != "'":
        c = s[j]
        if c != "\\" or j + 1 >= n:
            out.append(c)
            j += 1
            continue
        e = s[j + 1]
        j += 2
        if e in _ANSI_C:
            out.append(_ANSI_C[e])
        elif e in "01234567":
            m = re.match(r"[0-7]{0,2}", s[j:])
            digits = e + (m.group(0) if m else "")
            j += len(digits) - 1
            out.append(chr(int(digits, 8) & 0xFF))
        elif e in "xuU":
            width = {"x": 2, "u": 4, "U": 8}[e]
            m = re.match(f"[0-9A-Fa-f]{{1,{width}}}", s[j:])
            if not m:
                out.append("\\" + e)
                continue
            j += m.end()
            out.append(chr(int(m.group(0), 16)))
        elif e == "c" and j < n:
            out.append(chr(ord(s[j].upper()) ^ 0x40) if s[j] != "?" else "\x7f")
            j += 1
        else:
            out.append("\\" + e)
    return "".join(out), min(j + 1, n)


_SEQUENCE_RE = re.compile(r"\{(-?\d+\.\.-?\d+|[A-Za-z]\.\.[A-Za-z])(\.\.-?\d+)?\}")


def brace_expansion(raw: Raw) -> str:
    """The first ``{a,b}`` / ``{1..3}`` in ``raw`` that bash would expand into several words (braces and
    commas outside quotes and expansions), or ``""``."""
    # the word with everything bash does not brace-expand (quoted text, expansions) as a NUL
    pieces = [piece for p in raw.parts for piece in
              ([(c, c) for c in p[1]] if p[0] == "text" and not p[2] else
               [("\x00", p[1] if p[0] == "text" else "$…")])]
    text = "".join(mask for mask, _ in pieces)  # one character a piece
    for start, c in enumerate(text):
        if c != "{" or (start and text[start - 1] == "$"):
            continue
        m = _SEQUENCE_RE.match(text, start)
        if m:
            return m.group(0)
        depth, comma = 0, False
        for end in range(start, len(text)):
            if text[end] == "{":
                depth += 1
            elif text[end] == "," and depth == 1:
                comma = True
            elif text[end] == "}":
                depth -= 1
                if depth == 0:
                    if comma:
                        return "".join(shown for _, shown in pieces[start:end + 1])
                    break
    return ""
