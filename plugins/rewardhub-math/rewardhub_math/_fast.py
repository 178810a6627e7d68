"""math-verify's ``parse`` for answers that are plain numbers, without its slow number parsing.

math-verify turns every answer it extracts into a sympy object; a number goes through
``sympy.Number(text)``, which runs ``sympify`` (a Python parse with ``from sympy import *`` as its
namespace, ~0.3 ms each) and is most of the time a check takes. :func:`parse` follows math-verify's
own extraction step by step — its own regular expressions (``get_extraction_regexes`` of the
default targets), its priority groups, its rightmost-first order, its LaTeX normalisation — and
only where the answer it would convert is a plain integer or decimal (``-?digits``,
``-?digits.digits``, at most 15 significant digits), or a LaTeX ``\\frac`` of two plain integers,
makes that object directly (``sympy.Integer``/``sympy.Float``, what ``sympy.Number`` makes of
that text; ``sympy.Rational`` for the fraction, as latex2sympy evaluates it) with the same
fallback string. For anything else (other fractions, expressions, sets, percentages, units, several
boxed answers...) it returns ``None`` and the caller runs math-verify itself. Nothing of sympy or
math-verify is changed. The plugin's tests check the result against math-verify's over
thousands of generated responses (types, ``srepr``, hashes, strings and scores).

It follows math-verify's internals (``math_verify.parser``: ``get_extraction_regexes``,
``normalize_latex``, the extraction configs and the named groups of their patterns), so it holds
only for the releases it was checked against: :data:`FOLLOWS`, the range the plugin's dependency
pins too. With any other release installed, :func:`parse` steps aside (``None``: math-verify parses).
"""

from __future__ import annotations

import functools
import re
from typing import Any

__all__ = ["FOLLOWS", "follows", "parse", "plain_number"]

#: the math-verify releases (``>=`` low, ``<`` high) whose extraction :func:`parse` follows; the
#: plugin's pyproject pins the same range
FOLLOWS = ((0, 9), (0, 10))

_INTEGER = re.compile(r"-?(?:0|[1-9][0-9]*)")
_DECIMAL = re.compile(r"-?[0-9]+\.[0-9]+")
#: significant digits up to which sympy's default Float (53 bits) is what ``Number(text)`` makes too
_MAX_DIGITS = 15


def plain_number(text: str) -> Any:
    """``sympy.Number(text)`` for a plain integer or decimal ``text``, made directly; else ``None``."""
    if _INTEGER.fullmatch(text):
        if len(text) - text.startswith("-") > _MAX_DIGITS:
            return None
        import sympy

        return sympy.Integer(int(text))
    if _DECIMAL.fullmatch(text):
        if len(text) - text.startswith("-") - 1 > _MAX_DIGITS:
            return None
        import sympy

        return sympy.Float(text)
    return None


def follows(version: str) -> bool:
    """Is math-verify ``version`` one whose extraction :func:`parse` follows (within :data:`FOLLOWS`)?"""
    release = tuple(int(p) for p in re.findall(r"\d+", version.split("+")[0])[:2])
    return FOLLOWS[0] <= release < FOLLOWS[1]


@functools.lru_cache(maxsize=1)
def _targets() -> tuple[Any, list[tuple[int, list[tuple[Any, Any]]]]] | None:
    """math-verify's parser module and its default patterns, grouped by priority, as ``parse`` groups
    them; ``None`` for a release outside :data:`FOLLOWS`."""
    from importlib.metadata import version
    from itertools import groupby

    if not follows(version("math-verify")):
        return None
    from math_verify import parser

    res = parser.get_extraction_regexes([parser.LatexExtractionConfig(), parser.ExprExtractionConfig()])
    patterns = sorted(((pattern, target, priority) for target_patterns, target in res
                       for pattern, priority in target_patterns), key=lambda x: x[2])
    groups = [
        (priority, [(p, t) for p, t, _ in group]) for priority, group in groupby(patterns, key=lambda x: x[2])
    ]
    return parser, groups


def _expr_number(match: re.Match[str]) -> tuple[Any, str] | None:
    groups = match.groupdict()
    integer = next((v for k, v in groups.items() if k.startswith("integer") and v), "")
    decimal = next((v for k, v in groups.items() if k.startswith("decimal") and v), "")
    if not (integer or decimal) or groups.get("percent"):
        return None
    integer = integer.translate(str.maketrans("", "", ", ")).lstrip("0") or "0"
    text = integer + decimal.replace(",", ".")
    number = plain_number(text)
    return None if number is None else (number, text)


def _latex_number(parser: Any, match: re.Match[str], config: Any) -> tuple[Any, str] | None:
    found = [(k, v) for k, v in match.groupdict().items()
             if v and (k.startswith("first_latex") or (k.startswith("next") and "_latex" in k))]
    if len(found) != 1 or not found[0][0].startswith("first_latex"):
        return None  # several answers (math-verify makes a set of them), or none
    name, latex = found[0]
    if match.groupdict().get("first_percent"):
        return None
    norm = config.normalization_config
    if name.split("_")[1] == "latexBoxed":
        from dataclasses import replace

        norm = replace(norm, boxed="last")
    text = parser.normalize_latex(latex, config=norm)
    number = plain_number(text)
    if number is None:
        number = _fraction(text)
    return None if number is None else (number, text)


_FRACTION = re.compile(r"(-?)\\frac\{(-?(?:0|[1-9][0-9]{0,14}))\}\{([1-9][0-9]{0,14})\}")


def _fraction(latex: str) -> Any:
    """``\\frac{a}{b}`` (``-`` in front or not) of plain integers, ``b > 0``: the rational number
    latex2sympy makes of it (``Rational(a, b)``, an ``Integer`` when ``b`` divides ``a``); else ``None``."""
    m = _FRACTION.fullmatch(latex)
    if m is None:
        return None
    import sympy

    value = sympy.Rational(int(m.group(2)), int(m.group(3)))
    return -value if m.group(1) else value


def parse(text: str) -> list[Any] | None:
    """What ``math_verify.parse(text)`` returns, where its answer is a plain number; else ``None``
    (also for every text with a math-verify release outside :data:`FOLLOWS`)."""
    targets = _targets()
    if targets is None:
        return None
    parser, groups = targets
    for _, patterns in groups:
        matches = [(m, target) for pattern, target in patterns for m in pattern.finditer(text)]
        if not matches:
            continue
        match, target = max(matches, key=lambda mt: (mt[0].end(), -mt[0].start()))
        if isinstance(target, parser.ExprExtractionConfig):
            got = _expr_number(match)
        else:
            got = _latex_number(parser, match, target)
        # math-verify tries this match first; a plain number always converts, so it is the answer,
        # and its text the first fallback string
        return None if got is None else [got[0], got[1]]
    return []
