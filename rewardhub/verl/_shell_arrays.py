"""bash arrays in a launch script, as verl's examples build a command (for :mod:`rewardhub.verl._shell`):
``ARGS=(...)`` (one override a line, comments and ``\\``-newlines), ``ARGS+=(...)``, then
``main_ppo "${ARGS[@]}"``.

:func:`read_items` reads the words between ``NAME=(`` and its ``)``; each is expanded as a word of a
command. ``"${NAME[@]}"`` gives one word per element, ``"${NAME[*]}"`` one word of them all,
``${NAME[i]}`` and ``$NAME`` an element. An array set or appended to inside an
``if``/``for``/``while``/``case`` block is refused where it is used, naming both lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from dataclasses import field
from typing import TYPE_CHECKING
from typing import Any

from ..errors import UsageError
from ._shell_words import Raw
from ._shell_words import Unsafe

if TYPE_CHECKING:
    from ._shell import Reader

__all__ = ["ARRAY_HEAD_RE", "INDEX_RE", "Array", "assign", "elements", "read_items"]

#: the text before an array literal's ``(``: ``NAME=`` or ``NAME+=``
ARRAY_HEAD_RE = re.compile(r"^([A-Za-z_]\w*)(\+?)=$")
#: ``NAME[@]``, ``NAME[*]`` or ``NAME[3]`` inside ``${...}``
INDEX_RE = re.compile(r"([A-Za-z_]\w*)\[([@*]|\d+)\]")


@dataclass
class Array:
    """An array's words, and each in its reference form (``${oc.env:NAME}`` kept where the word reads as
    the same value that way); ``why`` instead where it cannot be known here."""

    words: list[str] = field(default_factory=list)
    refs: list[str] = field(default_factory=list)
    why: str = ""


def read_items(r: Reader, i: int) -> tuple[list[Raw], int]:
    """The element words of the array literal whose ``(`` is at ``i - 1``, and the index after its ``)``."""
    s, n, start = r.s, r.n, i - 1
    items: list[Raw] = []
    while i < n:
        c = s[i]
        if s.startswith("\\\n", i):
            i += 2
        elif c in " \t\r\n":
            i += 1
        elif c == "#" and s[i - 1] in " \t\r\n(":
            while i < n and s[i] != "\n":
                i += 1
        elif c == ")":
            return items, i + 1
        else:
            word, j = r.word(i)
            if j == i:  # ; & | < > ( inside the parentheses: not an array of words
                word = Raw(i, i + 1, [("unsafe", f"{c!r} inside an array's parentheses", False, False)])
                j = i + 1
            items.append(word)
            i = j
    raise UsageError(f"line {r.line(start)}: the array's '(' is never closed by a ')'\n"
                     "end the array with ')' on a line of its own (as bash needs)")


def assign(r: Reader, name: str, append: bool, items: list[Raw], where: str, public: Any) -> None:
    """``NAME=(...)`` / ``NAME+=(...)``: each element expanded as a command's word (``public``: the
    words with their reference forms, :func:`rewardhub.verl.scripts.public_words`)."""
    old = r.arrays.get(name) if append else None
    if append and old is None and name in r.vars:  # appending to a plain variable: its value comes first
        value = r.vars[name]
        old = Array([value], [r.refs.get(name, value)]) if value is not None else Array(why="")
    out = Array(list(old.words), list(old.refs), old.why) if old is not None else Array()
    r.vars.pop(name, None)
    r.refs.pop(name, None)
    if r.depth:
        out.why = (f"is changed inside an if/for/while/case block ({where}), which only running the script "
                   "decides")
    for item in items:
        if out.why:
            break
        try:
            words = r.expand(item, where)
            kept = public(r, item, where)
        except Unsafe as exc:
            out.why = f"is set from what cannot be known here ({exc})"
            break
        out.words += [w for w, _ in words]
        out.refs += [w for w, _ in kept]
    r.arrays[name] = out


def elements(r: Reader, name: str, index: str, where: str) -> list[str]:
    """The words ``${NAME[index]}`` stands for (``@``/``*``: all; a number: that one, if any)."""
    arr = r.arrays.get(name)
    if arr is None and r.sourced:
        raise Unsafe(f"${{{name}[{index}]}} in {where} may be set by {r.sourced}, which is not read here")
    if arr is None:  # no array of that name: no words, as bash has it (an array is never exported)
        return []
    if arr.why:
        raise Unsafe(f"${{{name}[{index}]}} in {where}: {name} {arr.why}")
    words = arr.refs if r.keep_env else arr.words
    if index in "@*":
        return list(words)
    k = int(index)
    return [words[k]] if k < len(words) else [""]
