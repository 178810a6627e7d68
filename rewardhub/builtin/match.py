"""Exact-match reward, after light normalisation."""

from __future__ import annotations

import re
from typing import Any

from ..decorator import reward
from ..hookspecs import hookimpl

__all__ = ["exact_match"]

_BOXED = re.compile(r"\\boxed\{((?:[^{}]|\{[^{}]*\})*)\}")


def _normalise(text: str, case_sensitive: bool) -> str:
    text = " ".join(str(text).strip().split())
    text = text.rstrip(".")
    return text if case_sensitive else text.lower()


def _answer_of(response: str, extract: str) -> str:
    if extract == "none":
        return response
    if extract == "boxed":
        found = _BOXED.findall(response)
        return found[-1] if found else ""
    if extract == "last_line":
        lines = [ln for ln in response.strip().splitlines() if ln.strip()]
        return lines[-1] if lines else ""
    raise ValueError(f"exact_match extract={extract!r} is not valid; use none, boxed or last_line")


@reward(name="exact_match")
def exact_match(*, response: str, ground_truth: Any, extract: str = "none",
                case_sensitive: bool = False, **kwargs: Any) -> float:
    """1.0 when the (extracted) response equals the ground truth after whitespace/case normalisation.

    ``extract`` is ``none`` (the whole response), ``boxed`` (the last ``\\boxed{}``) or
    ``last_line``. A list ground truth matches any of its items.

    Example:

        >>> exact_match(response=" Paris. ", ground_truth="paris")
        1.0
        >>> exact_match(response="\\\\boxed{12}", ground_truth="12", extract="boxed")
        1.0
    """
    golds = ground_truth if isinstance(ground_truth, (list, tuple)) else [ground_truth]
    got = _normalise(_answer_of(response or "", extract), case_sensitive)
    return 1.0 if any(got == _normalise(g, case_sensitive) for g in golds) else 0.0


@hookimpl
def rewardhub_register_rewards() -> list[Any]:
    return [exact_match]
