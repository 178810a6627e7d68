"""``string_check`` and ``text_similarity`` (all but ``cosine``, which asks an embeddings endpoint: see
``_model``), computed with the libraries the metrics come from: rapidfuzz, nltk, rouge-score."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ..errors import UsageError
from ._flags import GraderError

__all__ = ["string_check", "similarity"]


def string_check(operation: str, text: str, reference: str) -> float:
    """1.0 or 0.0: ``eq`` / ``ne`` (``neq``) compare whole strings, ``like`` is "contains" and ``ilike``
    "contains, ignoring case"."""
    if operation == "eq":
        return 1.0 if text == reference else 0.0
    if operation in ("ne", "neq"):
        return 1.0 if text != reference else 0.0
    if operation == "like":
        return 1.0 if reference in text else 0.0
    return 1.0 if reference.lower() in text.lower() else 0.0


def _need(module: str, extra: str = "graders") -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise UsageError(
            f"this text_similarity metric needs {module.split('.')[0]}, which is not installed\n"
            f"pip install 'rewardhub[{extra}]'"
        ) from None


@functools.cache
def _fuzzy() -> Callable[[str, str], float]:
    fuzz = _need("rapidfuzz.fuzz")
    utils = _need("rapidfuzz.utils")
    wratio, process = fuzz.WRatio, utils.default_process
    return lambda a, b: wratio(a, b, processor=process) / 100.0


@functools.cache
def _rouge(kind: str) -> Callable[[str, str], float]:
    scorer = _need("rouge_score.rouge_scorer").RougeScorer([kind], use_stemmer=True)
    return lambda a, b: float(scorer.score(b, a)[kind].fmeasure)


def _bleu(a: str, b: str) -> float:
    bleu = _need("nltk.translate.bleu_score")
    return float(bleu.sentence_bleu([b.split()], a.split()))


def _gleu(a: str, b: str) -> float:
    gleu = _need("nltk.translate.gleu_score")
    return float(gleu.sentence_gleu([b.split()], a.split()))


def _meteor(a: str, b: str) -> float:
    nltk = _need("nltk")
    try:
        nltk.data.find("corpora/wordnet")
    except LookupError:
        raise GraderError(
            "other_error",
            "evaluation_metric meteor needs nltk's WordNet data, which is not "
            "installed here (no PyPI package ships it): run `python -m nltk.downloader wordnet` "
            "where the network allows, or use another metric",
        ) from None
    meteor = _need("nltk.translate.meteor_score")
    return float(meteor.meteor_score([b.split()], a.split()))


def similarity(metric: str) -> Callable[[str, str], float]:
    """The function ``(text, reference) -> score`` of a local ``evaluation_metric``."""
    if metric == "fuzzy_match":
        return _fuzzy()
    if metric.startswith("rouge_"):
        return _rouge("rougeL" if metric == "rouge_l" else "rouge" + metric[6:])
    local: dict[str, Callable[[str, str], float]] = {"bleu": _bleu, "gleu": _gleu, "meteor": _meteor}
    return local[metric]
