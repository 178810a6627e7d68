"""Failed reward calls in training: counted per reward, shown, and a run that keeps failing stops.

What counts as failed, what becomes of an invalid sample (left out of its group's statistics and of
the update: :func:`rewardhub_trainer.learner.trained`) and the metrics are the README's ("Failing
rewards"). A reward whose error rate is above ``trainer.max_reward_error_rate`` in
:data:`STEPS_IN_A_ROW` trained steps in a row stops the run with one line naming it and its last error.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["STEPS_IN_A_ROW", "FailureWatch", "error_rates", "failed_without_value", "failures",
           "invalid_samples", "progress_postfix", "reward_value"]

#: trained steps in a row above ``trainer.max_reward_error_rate`` before the run stops
STEPS_IN_A_ROW = 3


def failures(result: Any) -> dict[str, tuple[int, int, str]]:
    """Per reward term of a :class:`rewardhub.execution.ScoreResult`: (failed samples, samples it
    applied to, the first line of its last error). A sample the term does not apply to (None, not
    failed) is not counted."""
    out: dict[str, tuple[int, int, str]] = {}
    errors, rewards = result.errors, result.rewards
    for name in result.columns:
        failed, applied, last = 0, 0, ""
        for errs, values in zip(errors, rewards):
            if name in errs:
                failed += 1
                applied += 1
                last = str(errs[name]).strip().splitlines()[0] if str(errs[name]).strip() else last
            elif values.get(name) is not None:
                applied += 1
        out[str(name)] = (failed, applied, last)
    return out


def failed_without_value(errors: Mapping[str, Any], rewards: Mapping[str, Any]) -> bool:
    """Does a row hold a term that failed and has no number for it (``on_failure: drop`` gives None,
    ``nan`` NaN)? Such a sample is invalid in training: the sum of its other terms is not its reward
    (a verifier that crashed on a right answer is not a wrong answer). Only ``zero`` trains a failure,
    as the 0.0 it asks for.

    ``errors``/``rewards``: one row of :class:`rewardhub.execution.ScoreResult` (``errors[i]``,
    ``rewards[i]``): a failed term is one named in the row's errors."""
    return any(isinstance(rewards.get(name), bool) or math.isnan(reward_value(rewards.get(name)))
               for name in errors)


def reward_value(value: Any) -> float:
    """A reward that does not apply or failed (``None``), or is not a finite number (``inf``, ``-inf``),
    is NaN: an invalid sample, left out of its group's statistics and counted in ``reward/nan``."""
    if value is None:
        return math.nan
    try:
        number = float(value)
    except (TypeError, ValueError):
        return math.nan
    return number if math.isfinite(number) else math.nan


def error_rates(fails: dict[str, tuple[int, int, str]]) -> dict[str, float]:
    """``rewards/<name>/error_rate`` of each term (0.0 for a term that applied to no sample)."""
    return {f"rewards/{name}/error_rate": failed / applied if applied else 0.0
            for name, (failed, applied, _) in fails.items()}


def invalid_samples(rewards: list[list[float]] | None) -> int:
    """Samples whose reward is NaN (a failed call, or no reward applied): left out of the update."""
    return sum(1 for group in rewards or [] for r in group if math.isnan(r))


class FailureWatch:
    """The driver's count of failed reward calls over the run, and the stop rule."""

    def __init__(self, max_rate: float) -> None:
        self.max_rate = max_rate
        self.failed: dict[str, int] = {}
        self.applied: dict[str, int] = {}
        self.in_row: dict[str, int] = {}
        self.last: dict[str, str] = {}
        self.invalid = 0

    def step(self, fails: dict[str, tuple[int, int, str]], invalid: int) -> str | None:
        """Count one trained step's failures; the reason to stop the run, or None."""
        self.invalid += invalid
        stop = None
        for name, (failed, applied, last) in fails.items():
            self.failed[name] = self.failed.get(name, 0) + failed
            self.applied[name] = self.applied.get(name, 0) + applied
            if last:
                self.last[name] = last
            rate = failed / applied if applied else 0.0
            self.in_row[name] = self.in_row.get(name, 0) + 1 if rate > self.max_rate else 0
            if stop is None and self.in_row[name] >= STEPS_IN_A_ROW:
                stop = (
                    f"reward {name!r}: {rate:.0%} of its calls failed, above trainer.max_reward_error_rate="
                    f"{self.max_rate:g} in {self.in_row[name]} steps in a row; last error: "
                    f"{self.last.get(name, '?')}"
                )
        return stop

    def every_call_failed(self) -> str | None:
        """At the end of a run: the reason to fail it when some reward failed on every sample it applied
        to (a run too short for the stop rule, e.g. 2 steps), or None. With
        ``trainer.max_reward_error_rate=1`` every failure is accepted, this one too."""
        if self.max_rate >= 1.0:
            return None
        for name, failed in self.failed.items():
            if failed and failed == self.applied.get(name):
                return (f"reward {name!r}: every one of its {failed} calls in the run failed, so nothing "
                        f"was learned from it; last error: {self.last.get(name, '?')}")
        return None

    def rates(self) -> dict[str, float]:
        """Each reward's failed calls over the samples it applied to, over the whole run."""
        return {name: round(self.failed[name] / self.applied[name], 6) if self.applied[name] else 0.0
                for name in self.failed}


def progress_postfix(metrics: Mapping[str, Any]) -> dict[str, str]:
    """The progress line's error rates: ``err[name]=0.25`` for each reward that failed in the step."""
    failed = [k for k, v in metrics.items() if k.startswith("rewards/") and k.endswith("/error_rate") and v]
    return {f"err[{k[len('rewards/'):-len('/error_rate')]}]": f"{metrics[k]:.2f}" for k in failed}
