"""The ``math_verify`` reward: final-answer checking with math-verify, safe in any thread."""

from __future__ import annotations

import functools
import logging
import re
from typing import Any

import math_verify as _math_verify_module  # noqa: F401 - imported up front: forked workers inherit it

from rewardhub.decorator import reward

from . import _fast

__all__ = ["math_verify", "extract_gold"]

_GSM8K = re.compile(r"####\s*(.+?)\s*$", re.DOTALL)
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")
_DELIMITED = re.compile(r"^\s*(\$|\\\(|\\\[)")

_mv: Any = None


def _not_the_timeout_notice(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith("Timeout is disabled")


def _math_verify() -> Any:
    """Import math-verify once; its "timeout is disabled" notice is filtered out of its loggers."""
    global _mv
    if _mv is None:
        import math_verify

        # We pass timeouts of None (signal.alarm raises off the main thread); rewardhub's
        # execution policy enforces the time limit instead, so the "you must time it out
        # yourself" log line is moot. A filter on math-verify's loggers (the logging API),
        # not a change to math-verify's own state.
        for name in ("math_verify.parser", "math_verify.grader"):
            logger = logging.getLogger(name)
            if _not_the_timeout_notice not in logger.filters:
                logger.addFilter(_not_the_timeout_notice)
        _mv = math_verify
    return _mv


def extract_gold(ground_truth: Any) -> str:
    """Normalise a gold answer: GSM8K ``#### n`` tails, lists (first item), numbers."""
    if isinstance(ground_truth, (list, tuple)):
        ground_truth = ground_truth[0] if ground_truth else ""
    text = str(ground_truth).strip()
    m = _GSM8K.search(text)
    if m:
        text = m.group(1).replace(",", "").strip()
    return text


def _parse(text: str) -> list[Any]:
    """``math_verify.parse(text)``: made directly where the answer is a plain number (see :mod:`._fast`)."""
    mv = _math_verify()
    fast = _fast.parse(text)
    if fast is not None:
        return fast
    return list(mv.parse(text, parsing_timeout=None))


def _parse_gold(gold: str) -> list[Any]:
    return list(_parse_gold_once(gold))


#: a gold answer that is a plain number: math-verify parses ``$<it>$`` to [Integer or Float, the text]
_PLAIN_NUMBER = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")
#: significant digits up to which sympy's default Float (53-bit) is what math-verify makes too
_PLAIN_DIGITS = 15


def _plain_number(gold: str) -> tuple[Any, ...] | None:
    """What ``parse(f"${gold}$")`` gives for a plain integer or decimal gold, made directly (sympy's
    ``Integer`` or ``Float`` and the text): ~100x faster than the LaTeX parser, whose sympify of
    the number is most of a gold's parse; ``None`` for anything else. Identical to math-verify's
    result (``srepr``, hash and text), checked by the plugin's tests over thousands of numbers."""
    if not _PLAIN_NUMBER.fullmatch(gold):
        return None
    if len(gold) - gold.startswith("-") - ("." in gold) > _PLAIN_DIGITS:
        return None
    import sympy

    return (sympy.Float(gold) if "." in gold else sympy.Integer(int(gold)), gold)


@functools.lru_cache(maxsize=4096)
def _parse_gold_once(gold: str) -> tuple[Any, ...]:
    """Parsed once per gold answer and process: GRPO scores every gold n times, once per response
    of its group (the parsed values are sympy expressions and strings, never changed by verify)."""
    plain = _plain_number(gold)
    if plain is not None:
        return plain
    if not _DELIMITED.match(gold) and "\\boxed" not in gold:
        parsed = _parse(f"${gold}$")
        if parsed:
            return tuple(parsed)
    return tuple(_parse(gold))


def _last_number(text: str) -> str | None:
    found = _NUMBER.findall(text)
    return found[-1].replace(",", "") if found else None


@reward(name="math_verify", executor="process", timeout_s=10.0, pure=True)
def math_verify(*, response: str, ground_truth: Any, prompt: Any = None, data_source: Any = None,
                extra_info: Any = None, **kwargs: Any) -> dict[str, float]:
    """1.0 when the response's final answer equals the gold answer (math-verify), else 0.0.

    Returns ``{"score", "extracted"}``: ``extracted`` is 1.0 when an answer was found at all.

    Example:

        >>> math_verify(response="so \\\\boxed{\\\\frac{1}{2}}", ground_truth="0.5")["score"]
        1.0
        >>> math_verify(response="The answer is 41.", ground_truth="#### 42")["score"]
        0.0
    """
    mv = _math_verify()
    gold_text = extract_gold(ground_truth)
    gold = _parse_gold(gold_text)
    if not gold:
        raise ValueError(f"math_verify: cannot parse the gold answer {gold_text!r}")
    text = response or ""
    pred = _parse(text)
    if not pred:
        number = _last_number(text)
        pred = _parse(number) if number is not None else []
    if not pred:
        return {"score": 0.0, "extracted": 0.0}
    ok = mv.verify(gold, pred, timeout_seconds=None)
    return {"score": 1.0 if ok else 0.0, "extracted": 1.0}


def _warm_up() -> None:
    """Run a few checks at import: math-verify builds its parser caches on first use (~0.1 s),
    and a worker forked after this import starts with them built instead of paying it again. The
    last one's numbers have too many digits for :mod:`._fast`: they reach math-verify's LaTeX parser."""
    for response, gold in (("so \\boxed{\\frac{1}{2}}", "0.5"), ("Answer: 17", "#### 17"),
                           ("The value is $\\frac{-12345678901234567}{4}$", "-12345678901234567")):
        try:
            math_verify(response=response, ground_truth=gold)
        except Exception:  # noqa: BLE001 - warming up is best effort
            pass


_warm_up()
