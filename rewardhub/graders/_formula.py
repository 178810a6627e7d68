"""``calculate_output`` of a ``multi`` grader: ``+ - * / ^``, parentheses, numbers, the sub-graders' names
and ``min max abs floor ceil exp sqrt log``, parsed once into a tree and evaluated without ``eval``."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from collections.abc import Mapping
from typing import Any

from ._flags import GraderError

__all__ = ["FUNCTIONS", "Formula"]

FUNCTIONS: dict[str, tuple[Callable[..., float], int, int]] = {  # name -> (fn, least args, most args)
    "min": (min, 1, 64),
    "max": (max, 1, 64),
    "abs": (abs, 1, 1),
    "floor": (math.floor, 1, 1),
    "ceil": (math.ceil, 1, 1),
    "exp": (math.exp, 1, 1),
    "sqrt": (math.sqrt, 1, 1),
    "log": (math.log, 1, 1),
}
_TOKEN = re.compile(
    r"\s*(?:(\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)|([A-Za-z_]\w*)|(\*\*|[-+*/^(),]))"
)
_BINARY = {
    "+": (1, False),
    "-": (1, False),
    "*": (2, False),
    "/": (2, False),
    "^": (3, True),
    "**": (3, True),
}
_MAX_LEN = 10_000


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise GraderError(
                "formula_parse_error",
                f"calculate_output {text!r}: cannot read {text[pos : pos + 10]!r} "
                f"at character {pos}; allowed: numbers, grader names, + - * / ^ ( ) and "
                f"{', '.join(FUNCTIONS)}",
            )
        kind = "num" if m.group(1) else "name" if m.group(2) else "op"
        out.append((kind, m.group(m.lastindex or 0)))
        pos = m.end()
    return out


class Formula:
    """A parsed ``calculate_output``; :meth:`__call__` evaluates it for the sub-graders' values."""

    def __init__(self, text: str) -> None:
        if not isinstance(text, str) or not text.strip():
            raise GraderError(
                "formula_parse_error", "calculate_output is empty; write e.g. '0.5 * a + 0.5 * b'"
            )
        if len(text) > _MAX_LEN:
            raise GraderError("formula_parse_error", f"calculate_output is over {_MAX_LEN} characters")
        self.text = text
        self._toks = _tokens(text)
        self._pos = 0
        self.names: set[str] = set()
        self.tree = self._expr(0)
        if self._pos != len(self._toks):
            self._fail(f"unexpected {self._toks[self._pos][1]!r}")
        del self._toks

    def _fail(self, why: str) -> Any:
        raise GraderError("formula_parse_error", f"calculate_output {self.text!r}: {why}")

    def _peek(self) -> tuple[str, str] | None:
        return self._toks[self._pos] if self._pos < len(self._toks) else None

    def _take(self) -> tuple[str, str]:
        tok = self._peek()
        if tok is None:
            self._fail("it ends too early")
        self._pos += 1
        return tok  # type: ignore[return-value]

    def _expr(self, least: int) -> Any:
        left = self._unary()
        while (tok := self._peek()) is not None and tok[0] == "op" and tok[1] in _BINARY:
            prec, right_assoc = _BINARY[tok[1]]
            if prec < least:
                break
            self._pos += 1
            right = self._expr(prec if right_assoc else prec + 1)
            left = ("^" if tok[1] == "**" else tok[1], left, right)
        return left

    def _unary(self) -> Any:
        tok = self._peek()
        if tok is not None and tok == ("op", "-"):
            self._pos += 1
            return ("neg", self._expr(3))
        if tok is not None and tok == ("op", "+"):
            self._pos += 1
            return self._expr(3)
        return self._atom()

    def _atom(self) -> Any:
        kind, text = self._take()
        if kind == "num":
            return ("num", float(text))
        if kind == "op" and text == "(":
            inner = self._expr(0)
            if self._take() != ("op", ")"):
                self._fail("a '(' is not closed")
            return inner
        if kind == "name":
            if self._peek() == ("op", "("):
                return self._call(text)
            self.names.add(text)
            return ("var", text)
        return self._fail(f"unexpected {text!r}")

    def _call(self, name: str) -> Any:
        if name not in FUNCTIONS:
            self._fail(f"{name}() is not a function here; allowed: {', '.join(FUNCTIONS)}")
        self._pos += 1
        args = []
        if self._peek() != ("op", ")"):
            args.append(self._expr(0))
            while self._peek() == ("op", ","):
                self._pos += 1
                args.append(self._expr(0))
        if self._take() != ("op", ")"):
            self._fail(f"{name}( is not closed")
        _, least, most = FUNCTIONS[name]
        if not least <= len(args) <= most:
            self._fail(
                f"{name}() takes {least if least == most else f'{least} or more'} argument(s), "
                f"not {len(args)}"
            )
        return ("call", name, args)

    def __call__(self, values: Mapping[str, float]) -> float:
        try:
            out = float(_eval(self.tree, values))
        except (ZeroDivisionError, ValueError, OverflowError, TypeError) as exc:
            raise GraderError(
                "formula_parse_error",
                f"calculate_output {self.text!r} cannot be computed for {dict(values)}: "
                f"{type(exc).__name__}: {exc}",
            ) from None
        if not math.isfinite(out):
            raise GraderError(
                "formula_parse_error", f"calculate_output {self.text!r} gives {out} for {dict(values)}"
            )
        return out


def _eval(node: Any, values: Mapping[str, float]) -> float:
    op = node[0]
    if op == "num":
        return node[1]  # type: ignore[no-any-return]
    if op == "var":
        return values[node[1]]
    if op == "neg":
        return -_eval(node[1], values)
    if op == "call":
        return float(FUNCTIONS[node[1]][0](*(_eval(a, values) for a in node[2])))
    a, b = _eval(node[1], values), _eval(node[2], values)
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if op == "/":
        return a / b
    out = a**b
    if isinstance(out, complex):
        raise ValueError(f"{a} ^ {b} is not a real number")
    return float(out)
