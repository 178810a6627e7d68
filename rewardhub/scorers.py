"""Where a ``reward:`` section is scored, chosen in one place: :func:`open_scorer`.

Every caller that scores (``score``, ``check``, ``serve``, ``to_trl``/``to_verl``, verl's reward managers,
``agents``, the trainer's reward client) opens its :class:`~rewardhub.execution.Scorer` here, and this
module is the only reader of ``reward.remote`` outside the config loader:

- ``reward.remote`` set: a :class:`~rewardhub.execution.remote.RemoteScorer` of that server, once it
  answered ``GET /info`` (its terms are the server's);
- ``workers`` given (the trainer): a :class:`~rewardhub.distributed.RewardWorkerPool` of Ray reward workers;
- else a :class:`~rewardhub.execution.Runner` in this process (a term with ``executor: ray`` gets a Ray
  executor), returned as it is, so the fast path of ``rewardhub score`` is the Runner's own.

The checks that ``score`` and ``serve`` make before the first call (a kwarg the reward does not take,
``executor: ray`` without Ray) live here too, and ``check`` reports them the same way.
"""

from __future__ import annotations

import inspect
from typing import Any

from .errors import UsageError
from .execution import Scorer
from .execution import Term
from .execution import effective_executor

__all__ = ["executor_problems", "kwargs_problems", "open_scorer", "scores_remotely",
           "term_problems"]


def scores_remotely(reward: Any) -> bool:
    """Whether a validated ``reward:`` section is scored on a ``rewardhub serve`` server."""
    return getattr(reward, "remote", None) is not None


def open_scorer(reward: Any, *, registry: Any = None, cache_dir: str | None = None, workers: Any = None,
                reference: Any = None, check: bool = True, lazy: bool = False) -> Scorer:
    """The scorer of ``reward`` (a ``reward:`` section: a validated ``RewardConfig`` or raw).

    :param registry: the registry to resolve local terms against (built when not given).
    :param cache_dir: the reward cache's folder (``rewardhub score --cache``).
    :param workers: :class:`~rewardhub.distributed.PoolSettings`: score on a pool of Ray reward workers.
    :param reference: with ``workers``, the driver's ``WorkerSetup`` the workers are checked against.
    :param check: refuse, before anything runs, a term that ``score`` cannot run (:func:`term_problems`).
    :param lazy: a server is first asked when the first batch comes, through ``reward.remote.retry_for_s``
        of retries (what a long run's reward client wants, once the driver checked the server); else it must
        answer ``GET /info`` within ``START_RETRY_S`` here.
    :raises UsageError: the server cannot be reached, or a term cannot run here (every problem listed).
    """
    from .config.schema import validate_reward

    section = validate_reward(reward)
    if section.remote is not None:
        from .execution.remote import RemoteScorer
        from .execution.remote import reached

        return RemoteScorer(section.remote) if lazy else reached(section.remote)
    if workers is not None:
        from .distributed import RewardWorkerPool

        if cache_dir is not None:  # the pool's shared cache keeps its file there
            import dataclasses

            workers = dataclasses.replace(workers, cache_dir=cache_dir)
        return RewardWorkerPool(section, workers, reference=reference, registry=registry)
    from .execution import Runner
    from .execution import resolve_terms
    from .registry import build_registry

    registry = build_registry(section) if registry is None else registry
    terms = resolve_terms(section, registry)
    if section.reward_model.enable or any(t.policy.executor == "ray" for t in terms):
        from .distributed import runner_from_config  # with its Ray executor (~15 ms to import)

        runner = runner_from_config(section, registry=registry, terms=terms, cache_dir=cache_dir)
    else:
        runner = Runner(terms, section.aggregation, cache_dir=cache_dir)
    problems = [p for t in runner.terms for p in term_problems(t, registry)] if check else []
    if problems:
        runner.close()
        raise UsageError("\n".join(problems))
    return runner


def executor_problems(term: Term) -> list[str]:
    """An executor that cannot run here (``ray`` without Ray installed)."""
    import importlib.util

    try:
        have_ray = importlib.util.find_spec("ray") is not None
    except (ImportError, ValueError):  # ray in sys.modules as None, or without a spec
        have_ray = False
    if effective_executor(term) == "ray" and not have_ray:
        return [f"{term.name} has executor: ray, but Ray is not installed here\n"
                "pip install 'ray[default]' (or the rewardhub-trainer package), or use executor: process"]
    return []


def term_problems(term: Term, registry: Any = None) -> list[str]:
    """What ``score`` refuses to run with, as ``check`` reports it: kwargs the reward does not take
    (unless it takes ``**kwargs``), an executor that cannot run here, and a judge under its calibration
    gate."""
    bad, _ = kwargs_problems(term)
    out = [f"reward term {term.name!r}: kwargs: {p}" for p in bad]
    out += [f"reward term {term.name!r}: {p}" for p in executor_problems(term)]
    if not bad and getattr(term.config, "calibration", None) is not None:  # no import without it
        from .builtin.judging.calibrate import calibration_problems

        out += calibration_problems(term, registry)  # one line naming the term and its figure
    return out


_SAMPLE_KEYS = {"prompt", "response", "ground_truth", "data_source", "extra_info", "sandbox"}


def kwargs_problems(term: Term) -> tuple[list[str], list[str]]:
    """(problems, notes) about term kwargs the reward function does not name."""
    import difflib

    fn = getattr(term.invoker, "fn", None)
    if not term.kwargs or fn is None:
        return [], []
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return [], []
    named = {n for n, p in params.items() if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}
    unknown = sorted(set(term.kwargs) - named)
    if not unknown:
        return [], []
    out = []
    for key in unknown:
        close = difflib.get_close_matches(key, sorted(named - _SAMPLE_KEYS), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        out.append(f"{term.name} has no parameter {key!r}{hint}; it takes: "
                   f"{', '.join(sorted(named - _SAMPLE_KEYS)) or 'no keyword arguments'}")
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return [], [o + " (it accepts **kwargs, so the value is passed but may be unused)" for o in out]
    return out, []
