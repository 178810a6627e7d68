"""Calibration of a judge against labelled examples, and the gate a term's ``calibration`` sets.

A gold file is JSON lines: a sample (``prompt``, ``response``, ``ground_truth``, ...) with a human
``label`` (0/1, true/false, pass/fail, yes/no, good/bad, or any numbers) or ``score`` (a number). A judge
term scores the rows, and the report gives: agreement and Cohen's kappa (labels: the judge's score mapped
onto the labels' scale, the nearest label), Spearman's rho (scores), the position-bias rate (pairwise
terms with swap: how often the two orders disagreed), the length bias (Spearman's rho of the judge's score
with the response's length among rows of one gold value, averaged), and the cost (calls, tokens, seconds).

A term's ``calibration: {gold: FILE, min_kappa: K}`` (or ``min_rho: R``) makes ``check``, ``score``,
``serve`` and ``train`` refuse to start when the judge falls under it.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
import os
import time
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from ...errors import UsageError
from .stats import cohen_kappa
from .stats import spearman_rho

__all__ = ["FIGURES", "calibrate_term", "calibration_problems", "gold_rows", "label_value"]

_WORDS = {"true": 1.0, "false": 0.0, "pass": 1.0, "fail": 0.0, "yes": 1.0, "no": 0.0, "good": 1.0,
          "bad": 0.0, "correct": 1.0, "incorrect": 0.0, "win": 1.0, "loss": 0.0, "tie": 0.5}
#: (term name, gold file) -> the figures of its last calibration in this process (summary.json reads them)
FIGURES: dict[str, dict[str, Any]] = {}


def label_value(raw: Any, where: str) -> float:
    """A gold label as a number (see ``_WORDS`` for the words it takes)."""
    if isinstance(raw, bool):
        return float(raw)
    if isinstance(raw, (int, float)) and math.isfinite(float(raw)):
        return float(raw)
    if isinstance(raw, str) and raw.strip().lower() in _WORDS:
        return _WORDS[raw.strip().lower()]
    raise UsageError(f"{where}: label {raw!r} is not a number or one of {', '.join(sorted(_WORDS))}\n"
                     "give each gold row a label like that, or a numeric score")


def gold_rows(path: str) -> tuple[list[dict[str, Any]], list[float], str]:
    """The samples of a gold file, their gold values, and which kind they are (``label`` or ``score``)."""
    if not os.path.isfile(path):
        raise UsageError(f"gold file {path!r} does not exist\ngive a JSON-lines file of samples with a "
                         "label or score each (paths are read from the working directory)")
    samples, gold, kinds = [], [], set()
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UsageError(f"{path}:{n}: not JSON ({exc.msg})") from None
            if not isinstance(row, dict) or ("label" in row) == ("score" in row):
                raise UsageError(f"{path}:{n}: give each gold row exactly one of 'label' or 'score'")
            kind = "label" if "label" in row else "score"
            kinds.add(kind)
            gold.append(label_value(row[kind], f"{path}:{n}"))
            info = dict(row.get("extra_info") or {})
            info.setdefault("uid", f"gold-{n}")  # each row its own group (pairwise against the reference)
            samples.append({k: row.get(k) for k in ("prompt", "response", "ground_truth", "data_source",
                                                    "messages")} | {"extra_info": info})
    if len(kinds) != 1 or len(gold) < 2:
        raise UsageError(f"{path}: give 2 or more gold rows, all with 'label' or all with 'score'")
    return samples, gold, kinds.pop()


def _judge_range(term: Any) -> tuple[float, float]:
    raw = term.kwargs.get("score_range")
    if raw is None:
        try:
            raw = inspect.signature(term.invoker.fn).parameters["score_range"].default
        except (KeyError, TypeError, ValueError, AttributeError):
            raw = (0.0, 1.0)
    low, high = (float(x) for x in raw)
    return low, high


def calibrate_term(term: Any, samples: Sequence[Mapping[str, Any]], gold: Sequence[float], kind: str,
                   registry: Any = None) -> dict[str, Any]:
    """Score ``samples`` with ``term`` (a resolved :class:`~rewardhub.execution.Term`) alone; its figures."""
    from ...config.schema import RewardConfig
    from ...execution import Runner

    cfg = dataclasses.replace(term.config, calibration=None, on_failure="nan")
    began = time.monotonic()
    with Runner.from_config(RewardConfig(rewards=(cfg,)), registry) as runner:
        res = runner.score([dict(s) for s in samples])
    wall = time.monotonic() - began
    outs = res.outcomes[runner.terms[0].name]
    ok = [i for i, o in enumerate(outs) if o.status == "ok" and o.value is not None]
    extras = [o.extra or {} for o in outs]
    fig: dict[str, Any] = {
        "rows": len(samples), "scored": len(ok), "failed": len(samples) - len(ok), "kind": kind,
        "judge_calls": sum(int(e.get("judge_calls", 0 if o.cache_hit else 1)) for e, o in zip(extras, outs)),
        "judge_tokens": sum(int(e.get("judge_tokens", 0)) for e in extras), "seconds": round(wall, 3)}
    scores = [float(outs[i].value) for i in ok]  # type: ignore[arg-type]
    gold_ok = [gold[i] for i in ok]
    if kind == "label":
        low, high = _judge_range(term)
        labels = sorted(set(gold))
        lo, hi = labels[0], labels[-1]
        mapped = [lo + (s - low) / (high - low) * (hi - lo) for s in scores]
        pred = [_nearest(labels, m) for m in mapped]
        fig["agreement"] = sum(p == g for p, g in zip(pred, gold_ok)) / len(ok) if ok else math.nan
        fig["kappa"] = cohen_kappa(gold_ok, pred)
    else:
        fig["rho"] = spearman_rho(gold_ok, scores)
    pairs = sum(float(extras[i].get("judge_swap_pairs", 0)) for i in ok)
    if pairs:
        fig["position_bias"] = sum(float(extras[i].get("judge_swap_flips", 0)) for i in ok) / pairs
    fig["length_bias"] = _length_bias([samples[i] for i in ok], scores, gold_ok)
    return fig


def _nearest(labels: Sequence[float], x: float) -> float:
    """The label nearest ``x`` (the higher of two as near)."""
    return min(labels, key=lambda v: (abs(v - x), -v))


def _length_bias(samples: Sequence[Mapping[str, Any]], scores: Sequence[float],
                 gold: Sequence[float]) -> float:
    """Spearman's rho of score with response length within each gold value (3+ rows), weighed by size."""
    total = weight = 0.0
    for g in set(gold):
        idx = [i for i, x in enumerate(gold) if x == g]
        if len(idx) < 3:
            continue
        lengths = [len(str(samples[i].get("response") or "")) for i in idx]
        rho = spearman_rho([scores[i] for i in idx], lengths)
        if not math.isnan(rho):
            total, weight = total + rho * len(idx), weight + len(idx)
    return total / weight if weight else math.nan


def calibration_problems(term: Any, registry: Any = None) -> list[str]:
    """The gate: one line when ``term``'s ``calibration`` figure falls under its minimum (none without
    ``calibration``). The figures go into :data:`FIGURES`."""
    cal = getattr(getattr(term, "config", None), "calibration", None)
    if not cal:
        return []
    where = f"reward term {term.name!r}: calibration"
    if not isinstance(cal, Mapping) or not cal.get("gold") or not ({"min_kappa", "min_rho"} & set(cal)):
        return [f"{where}: give {{gold: FILE, min_kappa: K}} or {{gold: FILE, min_rho: R}}"]
    unknown = set(cal) - {"gold", "min_kappa", "min_rho"}
    if unknown:
        return [f"{where}: unknown key(s) {', '.join(sorted(unknown))}; it takes gold, min_kappa, min_rho"]
    try:
        samples, gold, kind = gold_rows(str(cal["gold"]))
    except UsageError as exc:
        return [f"{where}: {str(exc).splitlines()[0]}"]
    key = f"{term.name}:{cal['gold']}"
    if key not in FIGURES:
        FIGURES[key] = {"term": term.name, "gold": str(cal["gold"]),
                        **calibrate_term(term, samples, gold, kind, registry)}
    fig = FIGURES[key]
    for name, figure in (("min_kappa", "kappa"), ("min_rho", "rho")):
        if name in cal:
            got = fig.get(figure, math.nan)
            if math.isnan(got) or got < float(cal[name]):
                why = "" if figure in fig else f" (the gold file has {kind}s: use min_" \
                                                 f"{'kappa' if kind == 'label' else 'rho'})"
                return [f"reward term {term.name!r} fails its calibration: {figure} {got:.3f} < {name} "
                        f"{float(cal[name]):g} on {fig['scored']} of {fig['rows']} rows of "
                        f"{cal['gold']}{why}"]
    return []
