"""Export registered rewards to other frameworks: a TRL ``reward_funcs`` callable, a verl ``compute_score``.

Both run through the execution engine, so the reward's policy (timeouts, process isolation,
``on_failure``) holds inside TRL or verl too.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Mapping
from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Any

if TYPE_CHECKING:
    from .execution import Runner

__all__ = ["to_trl", "to_verl"]

_GT_KEYS = ("ground_truth", "solution", "answer", "reward_model")


def _text(x: Any) -> Any:
    """Plain text of a TRL prompt/completion (conversational lists keep the last message's content)."""
    if isinstance(x, list) and x and isinstance(x[-1], Mapping) and "content" in x[-1]:
        content = x[-1]["content"]
        if isinstance(content, list):  # content blocks
            return "".join(b.get("text", "") for b in content if isinstance(b, Mapping))
        return content
    return x


class _LazyRunner:
    def __init__(self, term: dict[str, Any], registry: Any) -> None:
        self.term = term
        self.registry = registry
        self._runner: Runner | None = None
        self._lock = threading.Lock()

    def get(self) -> Runner:
        with self._lock:
            if self._runner is None:
                from .distributed import runner_from_config

                self._runner = runner_from_config({"rewards": [self.term]}, registry=self.registry)
                atexit.register(self._runner.close)
            return self._runner


def _term(reward: str | Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    term = {"name": reward} if isinstance(reward, str) else dict(reward)
    term.update(overrides)
    return term


def to_trl(reward: str | Mapping[str, Any], *, registry: Any = None, ground_truth_key: str | None = None,
           **term: Any) -> Any:
    """A TRL ``reward_funcs`` callable for a registered reward (or a config term mapping).

    TRL calls it as ``f(prompts=..., completions=..., completion_ids=..., **dataset_columns)``;
    it returns one float per completion (``None`` where the reward does not apply).

    Example::

        from trl import GRPOTrainer
        from rewardhub.adapters import to_trl

        trainer = GRPOTrainer(model=..., reward_funcs=[to_trl("math_verify")], train_dataset=ds)

    :param ground_truth_key: the dataset column with the gold answer (default: the first of
        ``ground_truth``, ``solution``, ``answer``, ``reward_model`` present).
    :param term: execution-policy overrides (``timeout_s``, ``executor``, ``kwargs``, ...).
    """
    t = _term(reward, term)
    lazy = _LazyRunner(t, registry)
    skip = {"trainer_state", "log_extra", "log_metric", "environments", "completion_ids"}

    def reward_func(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        n = len(completions)
        key = ground_truth_key or next((k for k in _GT_KEYS if k in kwargs), None)
        columns = {k: v for k, v in kwargs.items() if k not in skip and isinstance(v, (list, tuple)) and len(v) == n}
        samples = []
        for i in range(n):
            gt = columns[key][i] if key in columns else None
            if isinstance(gt, Mapping) and "ground_truth" in gt:  # verl-style reward_model column
                gt = gt["ground_truth"]
            samples.append({
                "prompt": _text(prompts[i]) if i < len(prompts) else None,
                "response": _text(completions[i]),
                "ground_truth": gt,
                "data_source": columns["data_source"][i] if "data_source" in columns else None,
                "extra_info": {k: v[i] for k, v in columns.items() if k not in (key, "data_source")},
            })
        return lazy.get().score(samples).scores

    name = t.get("alias") or t.get("name") or t.get("function") or "reward"
    reward_func.__name__ = str(name)  # TRL logs rewards under the function's name
    reward_func.__qualname__ = str(name)
    reward_func.__doc__ = f"rewardhub reward {name!r} for TRL."
    return reward_func


def to_verl(reward: str | Mapping[str, Any], *, registry: Any = None, **term: Any) -> Any:
    """A verl ``compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs)``.

    Returns a float, or a dict with ``score`` plus the reward's extra metrics when it has any (verl
    accepts both). Point verl's ``custom_reward_function`` at a module holding
    ``compute_score = to_verl("math_verify")``.
    """
    t = _term(reward, term)
    lazy = _LazyRunner(t, registry)

    def compute_score(data_source: Any, solution_str: str, ground_truth: Any, extra_info: Any = None,
                      **kwargs: Any) -> Any:
        sample = {"prompt": (extra_info or {}).get("prompt") if isinstance(extra_info, Mapping) else None,
                  "response": solution_str, "ground_truth": ground_truth, "data_source": data_source,
                  "extra_info": extra_info}
        res = lazy.get().score([sample])
        score = res.scores[0]
        extra = next(iter(res.extra[0].values()), None)
        score = 0.0 if score is None else float(score)
        return {"score": score, **extra} if extra else score

    compute_score.__name__ = "compute_score"
    return compute_score
