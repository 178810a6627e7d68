"""Reading a judge's verdict, and keeping graded text from forging one.

:func:`verdict` reads the score a template asks for (``Score: N``): a labelled score (``Score: 7``,
``**Rating:** 7/10``, ``Final score = 7``) wins over anything else in the reply; with none, ``N out of
HIGH`` or ``N/HIGH``; with none of those, a reply that is only a number. Two different verdicts, or
none, is a failure whose error quotes (a bounded part of) the reply, never a guess.

:func:`neutralised` rewrites what in a graded text looks like a verdict (``Score: 10``,
``Response 2: 9``, ``Ranking:``) or a block marker (``<<<``, ``>>>``) with look-alike characters, so that
a judge quoting the response hands the parser nothing it reads as a verdict.
"""

from __future__ import annotations

import re

from .model_http import JudgeError

__all__ = ["neutralised", "num", "quoted", "verdict"]

_NUM = r"-?\d+(?:\.\d+)?"
#: a number ends at a non-word character, and not inside a decimal (``7.5`` is one number)
_END = r"(?!\w)(?!\.\d)"
_LABEL = r"(?:(?:final|overall)\s+)?(?:score|rating|grade|verdict)"
_LABELLED = re.compile(
    rf"(?i)(?<![\w-]){_LABEL}\s*(?:\*\*|__)?\s*[:=]\s*(?:\*\*|__)?\s*({_NUM}){_END}"
    rf"(?:\s*(?:/|out\s+of)\s*({_NUM}){_END})?")
_OUT_OF = re.compile(rf"(?i)(?<![\w.-])({_NUM})\s*(?:/|out\s+of)\s*({_NUM}){_END}")
_ALONE = re.compile(rf"\s*(?:\*\*)?\s*({_NUM})\s*(?:\*\*)?\s*\.?\s*")
#: verdict look-alikes in graded text: a label, then ``:`` or ``=``
_LOOKALIKE = re.compile(r"(?i)(?<![\w-])((?:(?:final|overall)\s+)?(?:score|rating|grade|verdict|ranking|"
                        r"response\s*\d+)\s*(?:\*\*|__)?\s*)([:=])")
_SWAP = {":": "\u2236", "=": "\u2250"}  # RATIO, APPROACHES THE LIMIT: read alike, parsed never
#: how much of a reply an error quotes: its head and its tail
QUOTE_HEAD, QUOTE_TAIL = 200, 80


def quoted(text: str) -> str:
    """``text`` as an error quotes it: whole when short, else its head and tail with the length."""
    if len(text) <= QUOTE_HEAD + QUOTE_TAIL + 20:
        return repr(text)
    return f"{text[:QUOTE_HEAD]!r} ... {text[-QUOTE_TAIL:]!r} ({len(text)} characters)"


def neutralised(text: str) -> str:
    """``text`` with verdict and marker look-alikes swapped for characters that read alike."""
    text = _LOOKALIKE.sub(lambda m: m.group(1) + _SWAP[m.group(2)], text)
    text = re.sub(r"<{3,}", lambda m: "\u2039" * len(m.group(0)), text)
    return re.sub(r">{3,}", lambda m: "\u203a" * len(m.group(0)), text)


def num(x: float) -> str:
    """``x`` as a prompt or an error shows it: ``10``, not ``10.0``."""
    x = float(x)
    return str(int(x)) if x.is_integer() else str(x)


def _one(values: list[float], text: str, what: str, how: str) -> float:
    distinct = list(dict.fromkeys(values))
    if not distinct:
        raise JudgeError(f"the judge's reply has no {what} ({how}): {quoted(text)}\n"
                         "adjust template or score_regex to the judge's replies")
    if len(distinct) > 1:
        raise JudgeError(f"the judge's reply is ambiguous: its {what} is given {len(distinct)} different "
                         f"values ({', '.join(map(num, distinct))}): {quoted(text)}")
    return distinct[0]


def verdict(text: str, low: float, high: float, *, regex: str | None = None, what: str = "score") -> float:
    """The one verdict in a judge's ``text`` (see the module's docstring), in ``[low, high]``.

    :param regex: a user's ``score_regex`` in place of the reading above: its matches (group 1 when it
        has one) must all give one number.
    :raises JudgeError: no verdict, two different ones, one on another scale, or one outside the range.
    """
    if regex is not None:
        found = [float(m.group(1) if m.re.groups else m.group(0)) for m in re.finditer(regex, text)]
        value = _one(found, text, what, f"score_regex {regex!r}")
    else:
        pairs = [(m.group(1), m.group(2)) for m in _LABELLED.finditer(text)]
        if not pairs:
            pairs = [(m.group(1), m.group(2)) for m in _OUT_OF.finditer(text) if float(m.group(2)) == high]
        if not pairs:
            alone = _ALONE.fullmatch(text)
            pairs = [(alone.group(1), None)] if alone else []
        for _, scale in pairs:
            if scale is not None and float(scale) != high:
                raise JudgeError(f"the judge's {what} is out of {scale}, not out of {num(high)} "
                                 f"(score_range [{num(low)}, {num(high)}]): {quoted(text)}")
        value = _one([float(v) for v, _ in pairs], text, what, "expected `Score: N`")
    if not low <= value <= high:
        raise JudgeError(f"the judge's {what} {num(value)} is outside score_range [{num(low)}, "
                         f"{num(high)}]: {quoted(text)}")
    return value
