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
OmegaConf's ``${oc.env:NAME}`` inside an override's value (resolved when the config is loaded); one
set in the environment too, where that reads as the same value (see
:func:`rewardhub.config._shell_pick.public_words`), so that no written config holds a secret.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from dataclasses import field
from typing import Any

__all__ = ["ASSIGN_RE", "NAME_RE", "Raw", "Reader", "Script", "ShellWord", "Unsafe", "literal_head"]

_META = " \t\r\n;&|()<>"
NAME_RE = re.compile(r"[A-Za-z_]\w*")
ASSIGN_RE = re.compile(r"^([A-Za-z_]\w*)=")
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


class Unsafe(Exception):
    pass


@dataclass
class Raw:
    start: int
    end: int
    #: (kind, payload, quoted, after "=") with kind text | var | subst | unsafe | default
    parts: list[tuple[str, Any, bool, bool]] = field(default_factory=list)


class Reader:
    def __init__(self, text: str) -> None:
        self.s, self.n = text, len(text)
        self.vars: dict[str, str | None] = {}  # None: set in a way that cannot be known here
        self.cwd_known = True
        self.functions = bool(_FUNCTION_RE.search(text))  # then $1, $@ may be a function's arguments
        self.assigning = False  # expanding an assignment's value (a variable, not an override)
        #: expanding for the reference form: what comes from the environment is kept as ``${oc.env:NAME}``
        #: (see :func:`rewardhub.config._shell_pick.public_words`), and a variable set from it as in ``refs``
        self.keep_env = False
        #: a variable's value in its reference form, where that differs from its value
        self.refs: dict[str, str] = {}
        self.sourced = ""  # "line N: source FILE" once the script reads variables from a file not read here

    def line(self, pos: int) -> int:
        return self.s.count("\n", 0, pos) + 1

    # ---- splitting ------------------------------------------------------------------------------
    def commands(self) -> list[list[Raw]]:
        s, n = self.s, self.n
        out: list[list[Raw]] = [[]]
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

    def word(self, i: int) -> tuple[Raw, int]:
        s, n = self.s, self.n
        raw = Raw(i, i)
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
        """The index after the ``)`` / backquote closing the substitution at ``i`` (quotes and nesting
        respected)."""
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
    def expand(self, raw: Raw, where: str) -> list[tuple[str, bool]]:
        """The words ``raw`` becomes (text, whole); :class:`Unsafe` names what cannot be known."""
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
                    raise Unsafe(
                        f"the command substitution $({payload.strip()}) in {where} cannot be run here"
                    )
            elif kind == "unsafe":
                raise Unsafe(f"{payload} in {where} cannot be expanded without running the script")
            elif kind == "var":
                put(self.variable(payload, after_eq, quoted, where))
            else:
                name, default = payload
                value = self.vars.get(name, "") if name in self.vars else None
                if name.isdigit() or name in "@*#":
                    value = None
                if name in self.vars and value is None:
                    raise Unsafe(
                        f"${{{name}}} in {where} is set by the script in a way that cannot be read here"
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
        if not any(p[2] for p in raw.parts):  # an unquoted empty expansion is no word at all
            words = [w for w in words if w != ""]
        return [(w, not split) for w in words]

    def expand_text(self, text: str, where: str, after_eq: bool = False) -> str:
        inner = Reader(text)
        inner.vars, inner.cwd_known = self.vars, self.cwd_known
        inner.refs, inner.keep_env = self.refs, self.keep_env
        raw, _ = inner.word(0)
        raw.parts = [(k, p, q, after_eq or e) for k, p, q, e in raw.parts]
        return "".join(w for w, _ in inner.expand(raw, where))

    def variable(self, name: str, after_eq: bool, quoted: bool, where: str) -> str:
        if name in ("@", "*", "#") or name.isdigit():
            if self.functions and name != "0":
                raise Unsafe(
                    f"${name} in {where}: the script defines a function, whose arguments are not known here"
                )
            return "0" if name == "#" else ""  # a script run without arguments
        if name == "PWD" and name not in self.vars and self.cwd_known:
            return os.getcwd()
        if name in self.vars:
            value = self.vars[name]
            if value is None:
                raise Unsafe(f"${name} in {where} is set by the script in a way that cannot be read here "
                              "(a command substitution, read, or a for loop)")
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

    def assign(self, raw: Raw, where: str) -> None:
        name = ASSIGN_RE.match("".join(str(p[1]) for p in raw.parts[:40] if p[0] == "text"))
        if not name:
            return
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
        self.vars[name.group(1)] = value
        self.refs.pop(name.group(1), None)
        if ref is not None and ref != value:
            self.refs[name.group(1)] = ref

    def expand_kept(self, raw: Raw, where: str) -> list[tuple[str, bool]] | None:
        """:meth:`expand` with what comes from the environment kept as ``${oc.env:NAME}`` (None: the
        same words cannot be told so)."""
        self.keep_env = True
        try:
            return self.expand(raw, where)
        except Unsafe:
            return None
        finally:
            self.keep_env = False


def literal_head(raw: Raw) -> str:
    out = []
    for kind, payload, _, _ in raw.parts:
        if kind != "text":
            break
        out.append(payload)
    return "".join(out)
