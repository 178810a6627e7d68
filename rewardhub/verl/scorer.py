"""Scoring verl batches with rewardhub's Runner (:class:`VerlBatchScorer`): what both reward managers of
:mod:`rewardhub.verl.managers` call."""

from __future__ import annotations

import atexit
import logging
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Any

from ..errors import RewardExecutionError
from ._config import VERL_DEFAULT_TERM
from ._config import raise_per_row
from ._config import reward_section

if TYPE_CHECKING:
    from ..execution import Scorer

__all__ = ["MANAGER_NAME", "VerlBatchScorer", "lists", "reward_tensor"]

_log = logging.getLogger("rewardhub.verl")

#: the name a launch script selects (``reward.reward_manager.name=rewardhub``)
MANAGER_NAME = "rewardhub"


class VerlBatchScorer:
    """Scores verl batches with a Runner built from a verl config (see the module's text).

    Every row stands alone: a row that cannot be read (a malformed field, no ground truth a reward
    needs) or whose reward failed gets its ``on_failure`` value, the error in ``rewardhub_error``
    and a logged warning naming it; ``on_failure: raise`` raises for that row only. The other rows
    get their scores.

    :ivar scored: samples scored so far. :ivar failed: those of them flagged ``rewardhub_failed``.
    """

    def __init__(self, verl_config: Any, reward_fn_key: str = "data_source") -> None:
        from ..datasets import terms_needing
        from ..execution import RoutingWatch
        from ..scorers import open_scorer

        self.reward_fn_key = reward_fn_key
        section = reward_section(verl_config)
        # on_failure: raise scored as drop: this scorer raises for the failed row alone
        self.runner: Scorer = open_scorer(raise_per_row(section), check=False)
        facts = self.runner.facts
        self.names = [f.name for f in facts]
        # the config's own on_failure (before raise_per_row); a server's terms: its config's policies
        self.policies = {f.name: f.on_failure for f in facts}
        self.policies.update({f.name: str(c.on_failure) for f, c in zip(facts, section.rewards)})
        self.needing = terms_needing(self.runner)
        #: the rewards needing a ground truth that are not verl functions: a row whose ground truth is
        #: None is not given to them (verl's functions get None, as verl's naive manager passes it)
        self.needing_native = [f.name for f in facts if f.needs_ground_truth and f.adapter != "verl"]
        self.scored = 0
        self.failed = 0
        self._extra_keys: dict[str, None] = {}  # every extra key seen so far, in order (filled on every row)
        self.watch = RoutingWatch({f.name: f.routes for f in facts})  # a term applied to none
        atexit.register(self.runner.close)

    # ---- DataProto -> samples ---------------------------------------------------------------
    def read(self, parts: Sequence[Any], tokenizer: Any) -> tuple[list[Any], list[str]]:
        """The rows of several ``DataProto`` (each row once, in order, decoded in one call): a sample,
        or the :class:`~rewardhub.verl._batch.VerlBatchError` of a row that cannot be read; and labels."""
        from ._batch import read_rows

        required = []
        if VERL_DEFAULT_TERM["alias"] in self.names:  # verl's scorer picks its function by data source
            required.append(self.reward_fn_key)
        if self.needing:
            required.append("reward_model")
        return read_rows(parts, tokenizer, self.reward_fn_key, required=required,
                         needs_ground_truth=bool(self.needing))

    # ---- scoring ------------------------------------------------------------------------------
    def score(self, samples: Sequence[Any], labels: Sequence[str] | None = None,
              ) -> tuple[list[float], list[dict[str, Any]]]:
        """(reward per sample, ``reward_extra_info`` per sample); raises the first row's error where a
        reward with ``on_failure: raise`` failed."""
        results = self.score_rows(samples, labels)
        for r in results:
            if isinstance(r, BaseException):
                raise r
        done = [r for r in results if not isinstance(r, BaseException)]
        return [score for score, _ in done], [info for _, info in done]

    def score_rows(
        self, rows: Sequence[Any], labels: Sequence[str] | None = None
    ) -> list[tuple[float, dict[str, Any]] | RewardExecutionError]:
        """Per row: (reward, ``reward_extra_info``), or the error to raise for that row alone
        (``on_failure: raise``). ``rows`` holds samples and the exceptions of rows not read."""
        from ..scoring import score_rows
        from ._batch import NO_GROUND_TRUTH

        rows = list(rows)
        labels = list(labels) if labels is not None else [f"row {i}" for i in range(len(rows))]
        # rows no reward is called on: those not read, and those with no ground truth a reward needs
        skip = {i: dict.fromkeys(self.names, str(r)) if isinstance(r, BaseException)
                else dict.fromkeys(self.needing_native, NO_GROUND_TRUTH) for i, r in enumerate(rows)
                if isinstance(r, BaseException) or (self.needing_native and r.get("ground_truth") is None)}
        scored = score_rows(self.runner, rows, skip)
        self.watch.see(scored.columns)
        one = len(self.names) == 1
        out: list[tuple[float, dict[str, Any]] | RewardExecutionError] = []
        failures: list[str] = []
        for i, res in enumerate(scored.results):
            errors = res.get("errors", {})
            # a row no term scored: NaN where a failed term says nan, else 0.0
            nan = any(self.policies[n] == "nan" for n in errors)
            total = (math.nan if nan else 0.0) if i in skip else res["score"]
            info: dict[str, Any] = {}
            for name, extra in res["extra"].items():
                for key, v in extra.items():
                    info[key if one and key not in ("score", name) else f"{name}/{key}"] = v
            raising = [n for n in errors if self.policies[n] == "raise"]
            if raising:
                out.append(RewardExecutionError(
                    f"verl row ({labels[i]}): {errors[raising[0]]}\n"
                    f"(on_failure: raise for reward {raising[0]!r}; use zero, nan or drop to go on)",
                    reward=raising[0], index=i))
                continue
            reward = 0.0 if total is None else float(total)
            if errors:
                failures.append(f"({labels[i]}) -> {reward}: {'; '.join(errors.values())}")
            row: dict[str, Any] = {"score": reward, "acc": None if errors else reward}
            for name in self.names:
                value = res["rewards"][name]
                row[name] = math.nan if value is None else value
            row.update(info)
            row["rewardhub_failed"] = 1.0 if errors else 0.0
            row["rewardhub_error"] = "; ".join(errors.values())
            self._extra_keys.update(dict.fromkeys(info))
            out.append((reward, row))
        self.scored += len(rows)
        self.failed += sum(1 for res in scored.results if "errors" in res)
        if failures:
            more = f"; and {len(failures) - 3} more" if len(failures) > 3 else ""
            _log.warning("rewardhub: %d of %d verl rows not scored (their reward is on_failure's, flagged in "
                         "rewardhub_failed): %s%s", len(failures), len(rows),
                         "; ".join(f[:300] for f in failures[:3]), more)
        for r in out:  # every extra key on every row: verl stacks the keys of its first row
            if not isinstance(r, BaseException):
                for key in self._extra_keys:
                    r[1].setdefault(key, None)
        return out


def reward_tensor(data: Any, scores: list[float]) -> Any:
    """verl's token-level reward: each sample's score on its last valid response token (on the first
    token of a row whose mask could not be read)."""
    import torch

    from ._batch import row_lengths

    lengths = torch.tensor([n if isinstance(n, int) else 0 for n in row_lengths(data)], dtype=torch.long)
    out = torch.zeros_like(data.batch["responses"], dtype=torch.float32)
    rows = torch.arange(out.shape[0], device=out.device)
    out[rows, (lengths.to(out.device) - 1).clamp(min=0)] = out.new_tensor(scores)
    return out


def lists(infos: list[dict[str, Any]]) -> dict[str, list[Any]]:
    keys = list(dict.fromkeys(k for info in infos for k in info))
    return {k: [info.get(k) for info in infos] for k in keys}
