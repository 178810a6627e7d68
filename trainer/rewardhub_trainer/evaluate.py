"""Evaluation on ``data.val_files``: generate with the learner's current weights, score with the same
registry (when, and the metrics it writes: the README's "Evaluation").

It runs on an actor of its own that takes the learner's weights at that step, so the training
rollouters, their weight versions and the sample accounting are untouched; that actor asks Ray for
``resources.evaluator`` in its own bundle of the run's placement group and chooses its device as a
rollouter does. Scoring goes through the run's reward client.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from .actors import PromptBatch
from .actors import Rollout
from .fleet import Fleet
from .prepare import Prepared
from .stats import StepStats

__all__ = ["Evaluator", "val_metrics"]

#: validation prompts generated per call
CHUNK = 32
#: batch indices of validation batches start here (they seed generation; never a training index)
_INDEX0 = 1 << 40


def _mean(values: list[float]) -> float:
    good = [v for v in values if not math.isnan(v)]
    return sum(good) / len(good) if good else math.nan


def val_metrics(rollouts: list[Rollout]) -> dict[str, float]:
    """``val/...`` metrics of scored validation rollouts, overall and per data source."""
    scores: dict[str, list[float]] = defaultdict(list)  # "" (all) or data source -> aggregate scores
    terms: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in rollouts:
        assert r.rewards is not None and r.terms is not None, "rollout was not scored"
        for prompt, group, per_term in zip(r.batch.prompts, r.rewards, r.terms):
            for ds in ("", str(prompt.data_source)):
                scores[ds].extend(group)
                for sample in per_term:
                    for name, value in sample.items():
                        terms[(ds, name)].append(value)
    out: dict[str, float] = {"val/samples": float(len(scores[""]))}
    for ds, values in sorted(scores.items()):
        out[f"val/{ds}/score" if ds else "val/score"] = _mean(values)
    for (ds, name), values in sorted(terms.items()):
        out[f"val/{ds}/{name}/mean" if ds else f"val/{name}/mean"] = _mean(values)
    return out


class Evaluator:
    """The run's evaluations; a no-op when there is no validation set."""

    def __init__(self, prep: Prepared, fleet: Fleet, stats: StepStats,
                 report: Callable[[int, dict[str, Any]], None]) -> None:
        """``report(step, metrics)``: called with each evaluation's metrics (the run's trackers)."""
        self.prep, self.t, self.fleet, self.stats, self.report = prep, prep.cfg.trainer, fleet, stats, report
        self.dataset = prep.val_dataset
        self.history: list[dict[str, Any]] = []

    def due(self, step: int) -> bool:
        """Whether a training step ``step`` is followed by an evaluation."""
        t = self.t
        if self.dataset is None or t.test_freq == -1 or (self.history and self.history[-1]["step"] == step):
            return False
        return (t.test_freq > 0 and step % t.test_freq == 0) or step == t.total_steps

    def before_training(self, step: int) -> None:
        """verl's ``val_before_train``: evaluate the starting weights (those of ``step``)."""
        if self.dataset is not None and self.t.val_before_train:
            self.evaluate(step)

    def after_step(self, step: int) -> None:
        if self.due(step):
            self.evaluate(step)

    def evaluate(self, step: int) -> dict[str, Any]:
        assert self.dataset is not None
        t0 = time.perf_counter()
        fleet, rollout = self.fleet, self.prep.cfg.rollout
        fleet.start_evaluator(dataclasses.replace(rollout, n=rollout.val_n,
                                                  temperature=rollout.val_temperature))
        fleet.evaluator_sync(step)
        items = self.dataset.items
        rollouts = []
        for k, start in enumerate(range(0, len(items), CHUNK)):
            prompts = items[start:start + CHUNK]
            batch = PromptBatch(index=_INDEX0 + k, prompts=list(prompts),
                                dataset_indices=list(range(start, start + len(prompts))))
            rollouts.append(fleet.score(fleet.evaluator_generate(batch)))
        metrics: dict[str, Any] = {"step": step, **val_metrics(rollouts),
                                   "val/time_s": time.perf_counter() - t0}
        self.history.append(metrics)
        stats = self.stats
        with stats.metrics_path.open("a") as f:
            f.write(json.dumps(metrics, sort_keys=True) + "\n")
        for key, value in metrics.items():
            if key != "step":
                stats.tb.add_scalar(key, float(value), step)
        stats.tb.flush()
        self.report(step, metrics)
        return metrics

    def infos(self) -> list[dict[str, Any]]:
        """The evaluation actor's info (``role: evaluator``), once it has started; else none."""
        return self.fleet.evaluator_infos()

    def summary(self) -> dict[str, Any]:
        """``{"val": [every evaluation's metrics]}``, or nothing without a validation set."""
        return {"val": list(self.history)} if self.dataset is not None else {}

    def close(self) -> None:
        self.fleet.stop_evaluator()
