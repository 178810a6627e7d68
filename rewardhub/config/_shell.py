"""A verl launch script read as the shell would read it, or refused with the line that cannot be read.

:func:`read_script` splits a script into commands and words the way a POSIX shell does (quotes,
backslashes, ``\\``-newline continuations, comments, ``;``/``&``/``|``/newline separators, heredoc
bodies and redirections, which are no words), expands what the script itself says (``NAME=value``
and ``export NAME=value`` set before use, ``${NAME:-default}``, ``$(pwd)``/```pwd``` while no ``cd``
came before, the positional parameters of a script run without arguments, which are empty) and
splits an unquoted expansion into words as the shell does (``main_ppo $ARGS``). The overrides are
the words of the one command that runs verl (``python3 -m verl.trainer.main_ppo``, verl's
fully-async entry point, ``recipe.*.main_*``); a file with no such command is a file of overrides
(one per line, or one command carrying them). What cannot be known without running the script
(another command substitution, ``$((...))``, a variable set by ``read``/``for`` or from a
substitution, ``--config-path``, a second verl command) is a :class:`~rewardhub.errors.UsageError`
naming the line, never a silently wrong value. A variable the script does not set becomes
OmegaConf's ``${oc.env:NAME}`` inside an override's value (resolved when the config is loaded).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from dataclasses import field
from typing import Any

__all__ = ["Script", "ShellWord", "read_script"]

_META = " \t\r\n;&|()<>"
_NAME_RE = re.compile(r"[A-Za-z_]\w*")
_ASSIGN_RE = re.compile(r"^([A-Za-z_]\w*)=")
_FUNCTION_RE = re.compile(r"^\s*(function\s+[\w-]+|[\w-]+\s*\(\s*\))", re.M)
_KEY_RE = re.compile(r"^(\+\+|\+|~)?[A-Za-z_][\w\-]*(\.[\w\-]+)*$")


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


class _Unsafe(Exception):
    pass


@dataclass
class _Raw:
    start: int
    end: int
    #: (kind, payload, quoted, after "=") with kind text | var | subst | unsafe | default
    parts: list[tuple[str, Any, bool, bool]] = field(default_factory=list)


class _Reader:
    def __init__(self, text: str) -> None:
        self.s, self.n = text, len(text)
        self.vars: dict[str, str | None] = {}  # None: set in a way that cannot be known here
        self.cwd_known = True
        self.functions = bool(_FUNCTION_RE.search(text))  # then $1, $@ may be a function's arguments
        self.assigning = False  # expanding an assignment's value (a variable, not an override)
        self.sourced = ""  # "line N: source FILE" once the script reads variables from a file not read here

    def line(self, pos: int) -> int:
        return self.s.count("\n", 0, pos) + 1

    # ---- splitting ------------------------------------------------------------------------------
    def commands(self) -> list[list[_Raw]]:
        s, n = self.s, self.n
        out: list[list[_Raw]] = [[]]
        heredocs: list[tuple[str, bool]] = []
        i = 0
        while i < n:
            c = s[i]
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
            elif c in ";&|()":
                i += 1
                out.append([])
            elif c == "#" and (i == 0 or s[i - 1] in _META):
                while i < n and s[i] != "\n":
                    i += 1
            elif c in "<>" or (c.isdigit() and re.match(r"\d+[<>]", s[i:i + 4])):
                i = self.redirect(i, heredocs)
            else:
                word, i = self.word(i)
                out[-1].append(word)
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

    def word(self, i: int) -> tuple[_Raw, int]:
        s, n = self.s, self.n
        raw = _Raw(i, i)
        seen_eq = False

        def add(kind: str, payload: Any, quoted: bool) -> None:
            raw.parts.append((kind, payload, quoted, seen_eq))

        while i < n and s[i] not in _META:
            c = s[i]
            if c == "\\":
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
            end = self.closing(i)
            body = s[i + 1:end - 1] if s[i] == "`" else s[i + 2:end - 1]
            kind = "unsafe" if arith else "subst"
            add(kind, body if not arith else f"$(({body[1:-1]}))", quoted)
            return end
        if s.startswith("${", i):
            end = s.find("}", i)
            end = self.n - 1 if end < 0 else end
            inner = s[i + 2:end]
            m = re.fullmatch(r"([A-Za-z_]\w*|\d+|[@*#?$])(?:(:?[-=])(.*))?", inner, re.S)
            if not m:
                add("unsafe", "${" + inner + "}", quoted)
            elif m.group(2):
                add("default", (m.group(1), m.group(3)), quoted)
            else:
                add("var", m.group(1), quoted)
            return end + 1
        m = re.match(r"\$([A-Za-z_]\w*|\d|[@*#?$!-])", s[i:])
        if not m:
            add("text", "$", quoted)
            return i + 1
        add("var", m.group(1), quoted)
        return i + m.end()

    def closing(self, i: int) -> int:
        """The index after the ``)`` / backquote closing the substitution at ``i`` (quotes and nesting respected)."""
        s, n = self.s, self.n
        if s[i] == "`":
            j = i + 1
            while j < n and s[j] != "`":
                j += 2 if s[j] == "\\" else 1
            return min(j + 1, n)
        depth, j = 0, i + 1
        while j < n:
            c = s[j]
            if c == "\\":
                j += 2
                continue
            if c == "'":
                j = s.find("'", j + 1) + 1 or n
                continue
            if c == '"':
                j += 1
                while j < n and s[j] != '"':
                    j += 2 if s[j] == "\\" else 1
                j += 1
                continue
            if c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
                if depth == 0:
                    return j + 1
            j += 1
        return n

    # ---- expanding ------------------------------------------------------------------------------
    def expand(self, raw: _Raw, where: str) -> list[tuple[str, bool]]:
        """The words ``raw`` becomes (text, whole); :class:`_Unsafe` names what cannot be known."""
        fields: list[list[str]] = [[]]
        split = False

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
                    raise _Unsafe(f"the command substitution $({payload.strip()}) in {where} cannot be run here")
            elif kind == "unsafe":
                raise _Unsafe(f"{payload} in {where} cannot be expanded without running the script")
            elif kind == "var":
                put(self.variable(payload, after_eq, quoted, where))
            else:
                name, default = payload
                value = self.vars.get(name, "") if name in self.vars else None
                if name.isdigit() or name in "@*#":
                    value = None
                if name in self.vars and value is None:
                    raise _Unsafe(f"${{{name}}} in {where} is set by the script in a way that cannot be read here")
                if name not in self.vars and self.sourced and not name.isdigit():
                    raise _Unsafe(f"${{{name}}} in {where} may be set by {self.sourced}, which is not read here")
                if value:
                    put(value)
                elif after_eq and not name.isdigit() and not self.assigning:
                    put("${oc.env:" + name + "," + (self.expand_text(default, where, True) or "''") + "}")
                elif name in os.environ and not name.isdigit() and os.environ[name]:
                    put(os.environ[name])  # what the shell takes, run from here
                else:
                    put(self.expand_text(default, where, after_eq))
        words = ["".join(f) for f in fields]
        if not any(p[2] for p in raw.parts):  # an unquoted empty expansion is no word at all
            words = [w for w in words if w != ""]
        return [(w, not split) for w in words]

    def expand_text(self, text: str, where: str, after_eq: bool = False) -> str:
        inner = _Reader(text)
        inner.vars, inner.cwd_known = self.vars, self.cwd_known
        raw, _ = inner.word(0)
        raw.parts = [(k, p, q, after_eq or e) for k, p, q, e in raw.parts]
        return "".join(w for w, _ in inner.expand(raw, where))

    def variable(self, name: str, after_eq: bool, quoted: bool, where: str) -> str:
        if name in ("@", "*", "#") or name.isdigit():
            if self.functions and name != "0":
                raise _Unsafe(f"${name} in {where}: the script defines a function, whose arguments are not known "
                              "here")
            return "0" if name == "#" else ""  # a script run without arguments
        if name == "PWD" and name not in self.vars and self.cwd_known:
            return os.getcwd()
        if name in self.vars:
            value = self.vars[name]
            if value is None:
                raise _Unsafe(f"${name} in {where} is set by the script in a way that cannot be read here "
                              "(a command substitution, read, or a for loop)")
            return value
        if self.sourced:
            raise _Unsafe(f"${name} in {where} may be set by {self.sourced}, which is not read here")
        if name in os.environ:
            return os.environ[name]  # what the shell takes, run from here
        if after_eq and not self.assigning:
            return "${oc.env:" + name + "}"  # unset: loading the config says so, naming the key
        raise _Unsafe(f"${name} in {where} is not set in the script, nor in the environment, so its words cannot be known here")

    def assign(self, raw: _Raw, where: str) -> None:
        name = _ASSIGN_RE.match("".join(str(p[1]) for p in raw.parts[:40] if p[0] == "text"))
        if not name:
            return
        self.assigning = True
        try:
            # an assignment's value is not split into words (as if quoted)
            words = self.expand(_Raw(raw.start, raw.end, [(k, p, True, e) for k, p, _, e in raw.parts]), where)
            value: str | None = "".join(w for w, _ in words).split("=", 1)[1]
        except _Unsafe:
            value = None
        finally:
            self.assigning = False
        self.vars[name.group(1)] = value


def _literal_head(raw: _Raw) -> str:
    out = []
    for kind, payload, _, _ in raw.parts:
        if kind != "text":
            break
        out.append(payload)
    return "".join(out)


def read_script(text: str) -> Script:
    """The override words of ``text`` (a launch script or a file of overrides) and the verl entry point."""
    from ._shell_pick import entry_point
    from .overrides import is_override_word

    r = _Reader(text)
    runs: list[tuple[int, list[ShellWord], dict[str, Any] | None, list[str]]] = []
    for index, cmd in enumerate(r.commands()):
        words: list[ShellWord] = []
        unsafe: list[str] = []
        position = 0
        head = _literal_head(cmd[0])
        assigning = True
        for raw in cmd:
            line = r.line(raw.start)
            lit = _literal_head(raw)
            if assigning and _ASSIGN_RE.match(lit) and (position == 0 or words and words[-1].text in (
                    "export", "local", "declare", "readonly", "typeset")):
                if len(cmd) == 1 or all(_ASSIGN_RE.match(_literal_head(x)) for x in cmd) or position:
                    r.assign(raw, f"line {line}")
                continue
            assigning = assigning and lit in ("export", "local", "declare", "readonly", "typeset")
            try:
                expanded = r.expand(raw, f"line {line}")
            except _Unsafe as exc:
                unsafe.append(str(exc))
                words.append(ShellWord(text[raw.start:raw.end], "\x00", raw.start, raw.end, index, position, line,
                                       False))
                position += 1
                continue
            for t, whole in expanded:
                words.append(ShellWord(text[raw.start:raw.end], t, raw.start, raw.end, index, position, line, whole))
                position += 1
        if head in ("for", "select") and len(cmd) > 1:
            r.vars[_literal_head(cmd[1])] = None
        elif head == "read":
            for raw in cmd[1:]:
                if _NAME_RE.fullmatch(_literal_head(raw)):
                    r.vars[_literal_head(raw)] = None
        elif head in ("source", ".") and len(cmd) > 1:
            r.sourced = f"line {r.line(cmd[0].start)}: {head} {text[cmd[1].start:cmd[1].end]}"
        elif head in ("cd", "pushd", "popd"):
            r.cwd_known = False
        elif head == "unset":
            for raw in cmd[1:]:
                r.vars.pop(_literal_head(raw), None)
        entry = entry_point(words)
        if entry is not None or any(w.text != "\x00" and is_override_word(w.text) for w in words) or unsafe:
            runs.append((index, words, entry, unsafe))
    from ._shell_pick import choose

    return choose(runs)
