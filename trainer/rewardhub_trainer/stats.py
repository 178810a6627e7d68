"""Per-step metrics (``metrics.jsonl`` and TensorBoard), busy/idle time and the run's timing summary."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .plot import open_event_writer
from .plot import plot_metrics
from .plot import read_metrics

__all__ = ["StepStats", "fifths", "finite_mean"]


def fifths(values: list[float]) -> tuple[float, float]:
    """Mean of the first and of the last fifth of ``values`` (at least one value each)."""
    k = max(1, len(values) // 5)
    first, last = values[:k], values[-k:]
    return sum(first) / len(first), sum(last) / len(last)


def finite_mean(values: list[float]) -> float:
    """The mean of the values that are not NaN (NaN: none is)."""
    good = [v for v in values if not math.isnan(v)]
    return sum(good) / len(good) if good else math.nan


class StepStats:
    def __init__(self, out: Path, samples_per_step: int, *, resumed_from: int | None,
                 resume_dir: Path | None, num_rollouters: int = 1) -> None:
        self.out = out
        self.metrics_path = out / "metrics.jsonl"
        self.samples_per_step = samples_per_step
        self.num_rollouters = num_rollouters
        self.resumed_from, self.resume_dir = resumed_from, resume_dir
        self.tb: Any = None  #: opened by :meth:`start`: nothing is written into the folder before
        self.busy_s = {"rollouter": 0.0, "learner": 0.0, "step": 0.0}
        self.trained_here = 0
        self.trained_at: dict[int, int] = {}  # step -> samples trained in it (this run)
        self.dropped_events: list[dict[str, int]] = []
        self.reward_pids: set[int] = set()
        self.t0 = self.t_last = time.perf_counter()
        self.wall_s = 0.0

    def start(self) -> None:
        """The run has started for real (its actors are up): the metrics file and TensorBoard open now."""
        # Carry the earlier run's rows up to the checkpoint (and none after it) into this run's file.
        if self.resumed_from is not None and self.resume_dir is not None:
            rows = [
                r for r in read_metrics(self.resume_dir / "metrics.jsonl") if r["step"] <= self.resumed_from
            ]
            self.metrics_path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
        elif self.metrics_path.exists():
            self.metrics_path.unlink()
        if self.tb is None:
            self.tb = open_event_writer(self.out / "tensorboard")
        self.t0 = self.t_last = time.perf_counter()

    def busy(self, role: str, seconds: float) -> None:
        self.busy_s[role] = self.busy_s.get(role, 0.0) + seconds

    def dropped(self, event: dict[str, int], in_row: int = 0) -> None:
        self.dropped_events.append(event)
        self.tb.add_scalar("stale/batches_in_a_row", float(in_row), len(self.dropped_events))

    def rewind(self, step: int) -> None:
        """Forget the steps after ``step`` (the learner restarted from it): their rows leave
        ``metrics.jsonl``."""
        rows = [r for r in read_metrics(self.metrics_path) if r["step"] <= step]
        self.metrics_path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
        for s in [s for s in self.trained_at if s > step]:
            self.trained_here -= self.trained_at.pop(s)

    def idle(self) -> dict[str, float]:
        elapsed = max(1e-9, time.perf_counter() - self.t0)
        roll = 1.0 - self.busy_s["rollouter"] / (elapsed * self.num_rollouters)
        learn = 1.0 - self.busy_s["learner"] / elapsed
        return {"idle/rollouter": max(0.0, roll), "idle/learner": max(0.0, learn)}

    def step(self, step: int, item: Any, staleness: int, result: Mapping[str, float],
             totals: Mapping[str, int], *, queue_size: int = 0,
             extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        now = time.perf_counter()
        self.trained_here += item.num_samples
        self.trained_at[step] = item.num_samples
        self.reward_pids.update(int(p) for p in item.reward_pids)
        flat = [r for g in (item.rewards or []) for r in g]
        good = [r for r in flat if not math.isnan(r)]
        mean = finite_mean(flat)
        std = math.sqrt(sum((r - mean) ** 2 for r in good) / len(good)) if good else math.nan
        finished = [c.finished for g in item.groups for c in g]
        metrics: dict[str, Any] = {
            "step": step,
            "batch_index": item.batch.index,
            "dataset_indices": list(item.batch.dataset_indices),
            "policy_version": item.version,
            "staleness": staleness,
            "reward/mean": mean,
            "reward/std": std,
            "reward/nan": len(flat) - len(good),
            "response/finished_frac": sum(finished) / max(1, len(finished)),
            **{k: v for k, v in item.reward_metrics.items()},
            **{k: v for k, v in result.items() if k not in ("version",)},
            "time/gen_s": item.gen_s,
            **({"threads/rollouter": item.threads} if item.threads else {}),
            "time/score_s": item.score_s,
            "time/step_s": now - self.t_last,
            "time/elapsed_s": now - self.t0,
            "throughput/samples_per_s": self.trained_here / max(1e-9, now - self.t0),
            "throughput/step_samples_per_s": item.num_samples / max(1e-9, now - self.t_last),
            "samples/trained": totals["trained"],
            "samples/generated": totals["generated"],
            "samples/dropped_stale": totals["dropped_stale"],
            "samples/lost_on_restart": totals.get("lost_on_restart", 0),
            "samples/step": item.num_samples,
            "queue/size": queue_size,
            **self.idle(),
            **(extra or {}),
        }
        self.t_last = now
        with self.metrics_path.open("a") as f:
            f.write(json.dumps(metrics, sort_keys=True) + "\n")
        for key, value in metrics.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and key != "step":
                self.tb.add_scalar(key, float(value), step)
        self.tb.flush()
        return metrics

    def finish(self) -> None:
        self.wall_s = time.perf_counter() - self.t0
        if self.tb is not None:
            self.tb.close()

    def summary(self) -> dict[str, Any]:
        rows = read_metrics(self.metrics_path)
        out: dict[str, Any] = {
            "wall_s": round(self.wall_s, 3),
            "samples_trained_this_run": self.trained_here,
            "throughput_samples_per_s": self.trained_here / self.wall_s if self.wall_s else 0.0,
            "busy_s": {k: round(v, 3) for k, v in self.busy_s.items()},
            "idle_ratio": {
                "rollouter": max(
                    0.0, 1 - self.busy_s["rollouter"] / max(1e-9, self.wall_s * self.num_rollouters)
                ),
                "learner": max(0.0, 1 - self.busy_s["learner"] / max(1e-9, self.wall_s)),
            },
            "dropped_batches": len(self.dropped_events),
            "metrics": str(self.metrics_path),
            "tensorboard": str(self.out / "tensorboard"),
        }
        rewards = [r["reward/mean"] for r in rows if not math.isnan(r.get("reward/mean", math.nan))]
        if rewards:
            out["reward_first_fifth"], out["reward_last_fifth"] = fifths(rewards)
        if rows:
            out["plot"] = plot_metrics(rows, self.out / "metrics.png", title=str(self.out.name))
        return out
