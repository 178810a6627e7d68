"""A verl launch script read as the shell would read it, or refused with the line that cannot be read.

:func:`read_script` splits a script into commands and words the way a POSIX shell does, expands what
the script itself says (assignments before use, ``${NAME:-default}``, ``$(pwd)`` before any ``cd``, the
empty positional parameters) and bash arrays (:mod:`._shell_arrays`). The overrides are the words of
the one command that runs verl; a file with no such command is a file of overrides. What the README
("Legacy (verl) keys") lists as unknowable without running the script is a
:class:`~rewardhub.errors.UsageError` naming the line, never a silently wrong value. A variable the
script does not set becomes ``${oc.env:NAME}`` (:func:`rewardhub.verl.scripts.public_words`).
"""

from __future__ import annotations

import os
import re
from typing import Any

from ._shell_arrays import ARRAY_HEAD_RE
from ._shell_arrays import INDEX_RE
from ._shell_arrays import Array
from ._shell_arrays import assign as assign_array
from ._shell_arrays import elements
from ._shell_arrays import read_items
from ._shell_words import Raw
from ._shell_words import Script
from ._shell_words import ShellWord
from ._shell_words import Unsafe
from ._shell_words import ansi_c
from ._shell_words import brace_expansion
from ._shell_words import closing
from ._shell_words import literal_head

__all__ = ["ASSIGN_RE", "NAME_RE", "Raw", "Reader", "Script", "ShellWord", "Unsafe", "literal_head"]

_META = " \t\r\n;&|()<>"
NAME_RE = re.compile(r"[A-Za-z_]\w*")
ASSIGN_RE = re.compile(r"^([A-Za-z_]\w*)\+?=")
_FUNCTION_RE = re.compile(r"^\s*(function\s+[\w-]+|[\w-]+\s*\(\s*\))", re.M)
_KEY_RE = re.compile(r"^(\+\+|\+|~)?[A-Za-z_][\w\-]*(\.[\w\-]+)*$")


_WHY_UNKNOWN = "a command substitution, read, a for loop, or inside an if/while/case block"


class Reader:
    def __init__(self, text: str) -> None:
        self.s, self.n = text, len(text)
        self.vars: dict[str, str | None] = {}  # None: set in a way that cannot be known here
        self.cwd_known = True
        self.functions = bool(_FUNCTION_RE.search(text))  # then $1, $@ may be a function's arguments
        self.assigning = False  # expanding an assignment's value (a variable, not an override)
        #: expanding for the reference form: what comes from the environment is kept as ``${oc.env:NAME}``
        #: (see :func:`rewardhub.verl.scripts.public_words`), and a variable set from it as in ``refs``
        self.keep_env = False
        #: a variable's value in its reference form, where that differs from its value
        self.refs: dict[str, str] = {}
        self.arrays: dict[str, Array] = {}  # bash arrays (``ARGS=(...)``)
        self.depth = 0  # inside this many if/for/while/case blocks (set by the caller, command by command)
        self.block = ""  # the outermost of them: "the if block on line 3"
        self.sourced = ""  # "line N: source FILE" once the script reads variables from a file not read here
        #: why a variable set to None cannot be known (``STEPS=5`` after ``&&``: "set on line 3 only if ...")
        self.why: dict[str, str] = {}
        #: the operator before each command :meth:`commands` returns ("" a new line or ``;``, ``&&``,
        #: ``||``, ``|``, ``&``, ``(``) and whether it runs in a subshell (inside ``( ... )``)
        self.ops: list[tuple[str, bool]] = []

    def line(self, pos: int) -> int:
        return self.s.count("\n", 0, pos) + 1

    # ---- splitting ------------------------------------------------------------------------------
    def commands(self) -> list[list[Raw]]:
        s, n = self.s, self.n
        out: list[list[Raw]] = [[]]
        ops: list[tuple[str, bool]] = [("", False)]
        heredocs: list[tuple[str, bool]] = []
        subshell = 0  # inside this many ( ... )
        i = 0
        while i < n:
            c = s[i]
            if c in "<>" and s.startswith("(", i + 1):  # a process substitution: a word of its own
                word, i = self.word(i)
                out[-1].append(word)
                continue
            if c == "\\" and s.startswith("\\\n", i):
                i += 2
            elif c in " \t\r":
                i += 1
            elif c == "\n":
                i += 1
                for delim, strip in heredocs:  # skip each pending heredoc body, up to its delimiter line
                    while i < n:
                        end = s.find("\n", i)
                        end = n if end < 0 else end
                        body = s[i:end]
                        i = end + 1
                        if (body.lstrip("\t") if strip else body) == delim:
                            break
                heredocs = []
                out.append([])
                ops.append(("", subshell > 0))
            elif c in ";&|()":
                op = s[i:i + 2] if s.startswith(("&&", "||", ";;"), i) else c
                i += len(op)
                subshell = max(0, subshell + (c == "(") - (c == ")"))
                out.append([])
                ops.append(("" if op in (";", ";;", ")") else op, subshell > 0))
            elif c == "#" and (i == 0 or s[i - 1] in _META):
                while i < n and s[i] != "\n":
                    i += 1
            elif c in "<>" or (c.isdigit() and re.match(r"\d+[<>]", s[i:i + 4])):
                i = self.redirect(i, heredocs)
            else:
                word, i = self.word(i)
                if s.startswith("(", i) and ARRAY_HEAD_RE.match(literal_head(word)) and \
                        all(p[0] == "text" for p in word.parts):
                    word.items, i = read_items(self, i + 1)
                    word.end = i
                out[-1].append(word)
        self.ops = [op for cmd, op in zip(out, ops) if cmd]
        return [cmd for cmd in out if cmd]

    def redirect(self, i: int, heredocs: list[tuple[str, bool]]) -> int:
        s = self.s
        m = re.match(r"\d*(<<<|<<-|<<|<>|>>|>&|<&|>\||&>|<|>)", s[i:])
        assert m is not None
        op = m.group(1)
        i += m.end()
        if op in (">&", "<&") and re.match(r"\d+|-", s[i:]):
            return i + len(re.match(r"\d+|-", s[i:]).group(0))  # type: ignore[union-attr]
        while i < self.n and s[i] in " \t":
            i += 1
        target, i = self.word(i)
        if op in ("<<", "<<-"):
            delim = "".join(str(p[1]) for p in target.parts if p[0] == "text")
            heredocs.append((delim, op == "<<-"))
        return i

    def word(self, i: int) -> tuple[Raw, int]:
        s, n = self.s, self.n
        raw = Raw(i, i)
        seen_eq = False

        def add(kind: str, payload: Any, quoted: bool) -> None:
            raw.parts.append((kind, payload, quoted, seen_eq))

        while i < n and (s[i] not in _META or (s[i] in "<>" and s.startswith("(", i + 1))):
            c = s[i]
            if c in "<>":
                end = closing(s, i)
                add("unsafe", f"the process substitution {s[i:end]}", False)
                i = end
            elif s.startswith("$'", i):
                text, i = ansi_c(s, i)
                add("text", text, True)
            elif s.startswith('$"', i):  # bash's translated string: as "..." where no translation is set
                i = self.double(i + 2, add)
            elif c == "\\":
                if s.startswith("\\\n", i):
                    i += 2
                    continue
                add("text", s[i + 1:i + 2], True)
                i += 2
            elif c == "'":
                j = s.find("'", i + 1)
                j = n if j < 0 else j
                add("text", s[i + 1:j], True)
                i = j + 1
            elif c == '"':
                i = self.double(i + 1, add)
            elif c == "$" or c == "`":
                i = self.dollar(i, add, quoted=False)
            else:
                if c == "=" and not seen_eq and all(p[0] == "text" for p in raw.parts) and \
                        _KEY_RE.match("".join(p[1] for p in raw.parts)):
                    seen_eq = True  # what follows is an override's value (a flag's "=" is not)
                add("text", c, False)
                i += 1
        raw.end = i
        return raw, i

    def double(self, i: int, add: Any) -> int:
        s, n = self.s, self.n
        while i < n and s[i] != '"':
            if s[i] == "\\" and i + 1 < n and s[i + 1] in '"\\$`\n':
                if s[i + 1] != "\n":
                    add("text", s[i + 1], True)
                i += 2
            elif s[i] in "$`":
                i = self.dollar(i, add, quoted=True)
            else:
                add("text", s[i], True)
                i += 1
        return i + 1

    def dollar(self, i: int, add: Any, quoted: bool) -> int:
        s = self.s
        if s[i] == "`" or s.startswith("$(", i):
            arith = s.startswith("$((", i)
            end = closing(self.s, i)
            body = s[i + 1:end - 1] if s[i] == "`" else s[i + 2:end - 1]
            kind = "unsafe" if arith else "subst"
            add(kind, body if not arith else f"$(({body[1:-1]}))", quoted)
            return end
        if s.startswith("${", i):
            end = closing(s, i)
            inner = s[i + 2:end - 1]
            if INDEX_RE.fullmatch(inner):
                add("array", INDEX_RE.fullmatch(inner).groups(), quoted)  # type: ignore[union-attr]
                return end
            m = re.fullmatch(r"([A-Za-z_]\w*|\d+|[@*#?$])(?:(:?[-=])(.*))?", inner, re.S)
            if not m:
                add("unsafe", "${" + inner + "}", quoted)
            elif m.group(2):
                add("default", (m.group(1), m.group(3)), quoted)
            else:
                add("var", m.group(1), quoted)
            return end
        m = re.match(r"\$([A-Za-z_]\w*|\d|[@*#?$!-])", s[i:])
        if not m:
            add("text", "$", quoted)
            return i + 1
        add("var", m.group(1), quoted)
        return i + m.end()

    # ---- expanding ------------------------------------------------------------------------------
    def expand(self, raw: Raw, where: str, braces: bool = True) -> list[tuple[str, bool]]:
        """The words ``raw`` becomes (text, whole); :class:`Unsafe` names what cannot be known (also a
        brace expansion ``{a,b}``, which bash makes several words of, unless ``braces`` is false)."""
        brace = brace_expansion(raw) if braces else ""
        if brace:
            raise Unsafe(f"the brace expansion {brace} in {where} is made several words by bash, which is "
                         "not done here (quote the braces to keep them as they are)")
        fields: list[list[str]] = [[]]
        split = False
        vanished = False  # a quoted "${NAME[@]}" of no elements (no word, unless the rest makes one)

        def literal(text: str) -> None:
            fields[-1].append(text)

        def splittable(text: str) -> None:
            nonlocal split
            pieces = re.split(r"[ \t\n]+", text)
            if len(pieces) > 1 or text.strip() != text:
                split = True
            for k, piece in enumerate(pieces):
                if k:
                    fields.append([])
                fields[-1].append(piece)

        for kind, payload, quoted, after_eq in raw.parts:
            put = literal if quoted else splittable
            if kind == "text":
                literal(payload)
            elif kind == "subst":
                if payload.strip() == "pwd" and self.cwd_known:
                    put(os.getcwd())
                else:
                    raise Unsafe(
                        f"the command substitution $({payload.strip()}) in {where} cannot be run here"
                    )
            elif kind == "unsafe":
                raise Unsafe(f"{payload} in {where} cannot be expanded without running the script")
            elif kind == "array":
                name, index = payload
                words = elements(self, name, index, where)
                split = True  # the words are not the script's text at this place
                if index == "@" and quoted:
                    vanished = vanished or not words
                    for k, w in enumerate(words):
                        if k:
                            fields.append([])
                        literal(w)
                else:
                    put(" ".join(words))
            elif kind == "var":
                put(self.variable(payload, after_eq, quoted, where))
            else:
                name, default = payload
                value = self.vars.get(name, "") if name in self.vars else None
                if name.isdigit() or name in "@*#":
                    value = None
                if name in self.vars and value is None:
                    raise Unsafe(
                        f"${{{name}}} in {where} is set by the script in a way that cannot be read here "
                        f"({self.why.get(name, _WHY_UNKNOWN)})"
                    )
                if name not in self.vars and self.sourced and not name.isdigit():
                    raise Unsafe(
                        f"${{{name}}} in {where} may be set by {self.sourced}, which is not read here"
                    )
                if value:
                    put(self.refs.get(name, value) if self.keep_env else value)
                elif after_eq and not name.isdigit() and not self.assigning:
                    put("${oc.env:" + name + "," + (self.expand_text(default, where, True) or "''") + "}")
                elif name in os.environ and not name.isdigit() and os.environ[name]:
                    # what the shell takes, run from here
                    put("${oc.env:" + name + "}" if self.keep_env else os.environ[name])
                else:
                    put(self.expand_text(default, where, after_eq))
        words = ["".join(f) for f in fields]
        if not any(p[2] for p in raw.parts) or (vanished and words == [""]):  # no word at all
            words = [w for w in words if w != ""]
        return [(w, not split) for w in words]

    def expand_text(self, text: str, where: str, after_eq: bool = False) -> str:
        inner = Reader(text)
        inner.vars, inner.cwd_known = self.vars, self.cwd_known
        inner.refs, inner.keep_env = self.refs, self.keep_env
        raw, _ = inner.word(0)
        raw.parts = [(k, p, q, after_eq or e) for k, p, q, e in raw.parts]
        return "".join(w for w, _ in inner.expand(raw, where, braces=False))

    def variable(self, name: str, after_eq: bool, quoted: bool, where: str) -> str:
        if name in ("@", "*", "#") or name.isdigit():
            if self.functions and name != "0":
                raise Unsafe(
                    f"${name} in {where}: the script defines a function, whose arguments are not known here"
                )
            return "0" if name == "#" else ""  # a script run without arguments
        if name == "PWD" and name not in self.vars and self.cwd_known:
            return os.getcwd()
        if name in self.arrays:  # $NAME of an array: its first element
            return (elements(self, name, "0", where) or [""])[0]
        if name in self.vars:
            value = self.vars[name]
            if value is None:
                raise Unsafe(f"${name} in {where} is set by the script in a way that cannot be read here "
                             f"({self.why.get(name, _WHY_UNKNOWN)})")
            return self.refs.get(name, value) if self.keep_env else value
        if self.sourced:
            raise Unsafe(f"${name} in {where} may be set by {self.sourced}, which is not read here")
        if name in os.environ:
            # what the shell takes, run from here
            return "${oc.env:" + name + "}" if self.keep_env else os.environ[name]
        if after_eq and not self.assigning:
            return "${oc.env:" + name + "}"  # unset: loading the config says so, naming the key
        raise Unsafe(
            f"${name} in {where} is not set in the script, nor in the environment, so its words cannot be "
            "known here"
        )

    def assign(self, raw: Raw, where: str, public: Any = None) -> None:
        """``NAME=value`` (``NAME+=value`` appends), ``NAME=(...)`` an array (``public``: how its words
        are expanded, with their reference forms)."""
        head = "".join(str(p[1]) for p in raw.parts[:40] if p[0] == "text")
        name = ASSIGN_RE.match(head)
        if not name:
            return
        if raw.items is not None:
            assign_array(self, name.group(1), head.endswith("+="), raw.items, where, public)
            return
        old = self.vars.get(name.group(1), "") if head.split("=", 1)[0].endswith("+") else ""
        if old is None:
            self.vars[name.group(1)] = None
            return
        self.arrays.pop(name.group(1), None)
        # an assignment's value is not split into words (as if quoted)
        quoted = Raw(raw.start, raw.end, [(k, p, True, e) for k, p, _, e in raw.parts])
        self.assigning = True
        try:
            value: str | None = "".join(w for w, _ in self.expand(quoted, where)).split("=", 1)[1]
            self.keep_env = True
            ref = "".join(w for w, _ in self.expand(quoted, where)).split("=", 1)[1]
        except Unsafe:
            value = ref = None
        finally:
            self.assigning = self.keep_env = False
        if old and value is not None and ref is not None:
            value, ref = old + value, self.refs.get(name.group(1), old) + ref
        self.why.pop(name.group(1), None)
        if self.depth:  # whether the block's body runs only running the script decides
            value = None
            self.why[name.group(1)] = f"set inside {self.block}, which only running the script decides"
        self.vars[name.group(1)] = value
        self.refs.pop(name.group(1), None)
        if ref is not None and ref != value:
            self.refs[name.group(1)] = ref
