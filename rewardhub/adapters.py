"""Export registered rewards to other frameworks: a TRL ``reward_funcs`` callable, a verl ``compute_score``.

Both run through the execution engine, so the reward's policy (timeouts, process isolation,
``on_failure``) holds inside TRL or verl too. A failed call is never passed off as a score: TRL gets
None for it ("not scored", unless the term's own ``on_failure`` says otherwise) and a count in its
metrics; verl gets a flag and the error text next to the score.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Mapping
from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Any

if TYPE_CHECKING:
    from .config.schema import RemoteConfig
    from .execution import Scorer
    from .execution import ScoreResult
    from .execution import TermFacts

__all__ = ["to_trl", "to_verl"]

_GT_KEYS = ("ground_truth", "solution", "answer", "reward_model")
#: what a sample without a ground truth gets from a reward that needs one
_NO_GROUND_TRUTH = "no ground truth for this sample (None), which this reward needs"


def _text(x: Any) -> Any:
    """Plain text of a TRL prompt/completion (conversational lists keep the last message's content)."""
    if isinstance(x, list) and x and isinstance(x[-1], Mapping) and "content" in x[-1]:
        content = x[-1]["content"]
        if isinstance(content, list):  # content blocks
            return "".join(b.get("text", "") for b in content if isinstance(b, Mapping))
        return content
    return x


def _is_chat(x: Any) -> bool:
    return isinstance(x, list) and bool(x) and all(isinstance(m, Mapping) and "role" in m for m in x)


class _LazyRunner:
    """The scorer of an exported reward, built at its first call: a Runner of the one term, or with
    ``remote`` a ``rewardhub serve`` server's (``pick``: the term whose value is given; None: the
    server's aggregate score)."""

    def __init__(self, term: dict[str, Any], registry: Any, remote: RemoteConfig | str | None = None,
                 pick: str | None = None) -> None:
        self.term = term
        self.registry = registry
        #: ``to_trl``/``to_verl``'s ``remote=``: the server that scores (None: a Runner of ``term``)
        self.server, self.pick = remote, pick
        self._runner: Scorer | None = None
        self._lock = threading.Lock()
        #: the term's facts, once the runner is built (None: a server's terms, whose server checks them)
        self.first: TermFacts | None = None
        #: every extra key the reward has returned so far (verl stacks the same keys for every sample)
        self.extra_keys: dict[str, None] = {}
        #: says once (per callable) when the reward has applied to none of the rows it was given
        self.watch: Any = None

    def get(self) -> Scorer:
        with self._lock:
            if self._runner is None:
                self._runner = self._open()
                atexit.register(self._runner.close)
            return self._runner

    def _open(self) -> Scorer:
        import dataclasses

        from .errors import UsageError
        from .execution import RoutingWatch
        from .scorers import open_scorer

        remote = self.server if isinstance(self.server, str) or self.server is None else \
            dataclasses.asdict(self.server)
        scorer = open_scorer({"remote": remote} if remote is not None else {"rewards": [self.term]},
                             registry=self.registry, check=False)
        facts = scorer.facts
        names = [f.name for f in facts]
        if self.pick is not None and self.pick not in names:
            scorer.close()
            url = remote["url"] if isinstance(remote, dict) else remote
            raise UsageError(f"reward server {url} scores with {', '.join(names)}, not {self.pick!r}\n"
                             "name one of those, or none for the server's aggregate score")
        self.first = facts[0] if remote is None else None
        self.watch = RoutingWatch({f.name: f.routes for f in facts} if remote is None else {})
        return scorer

    def value(self, res: ScoreResult, k: int) -> float | None:
        """Sample ``k``'s reward: the score, or the picked term's value."""
        return res.scores[k] if self.pick is None else res.rewards[k].get(self.pick)


def _exported(who: str, reward: str | Mapping[str, Any] | None, overrides: dict[str, Any], registry: Any,
              remote: RemoteConfig | str | None, on_failure: str) -> tuple[_LazyRunner, str]:
    """The scorer of ``to_trl``/``to_verl`` (``who``), and the name the reward goes by."""
    from .errors import UsageError

    if remote is not None:
        if overrides or not (reward is None or isinstance(reward, str)):
            raise UsageError(f"{who}(remote=...): the server's config holds the terms and their policies\n"
                             "give at most the name of one of the server's terms, and no settings")
        return _LazyRunner({}, registry, remote, reward), reward or "remote"
    if reward is None:
        raise UsageError(f"{who}(): name a reward (or a config term), or score on a server: remote=URL")
    term = {"name": reward} if isinstance(reward, str) else dict(reward)
    term.update(overrides)
    term.setdefault("on_failure", on_failure)
    return _LazyRunner(term, registry), str(term.get("alias") or term.get("name") or term.get("function")
                                            or "reward")


def to_trl(reward: str | Mapping[str, Any] | None = None, *, registry: Any = None,
           ground_truth_key: str | None = None, remote: RemoteConfig | str | None = None, **term: Any) -> Any:
    """A TRL ``reward_funcs`` callable for a registered reward (or a config term mapping).

    TRL calls it as ``f(prompts=..., completions=..., completion_ids=..., **dataset_columns)``; a
    conversational completion (assistant turns with ``tool_calls``, tool results) makes the sample a
    trajectory (its prompt's messages, then the completion's), and ``environments`` (from TRL's
    ``environment_factory``) reach the reward as ``extra_info["environment"]``. It returns one float
    per completion, or ``None`` (TRL's "not scored") where the reward does not apply, where its call
    failed (raised, timed out) and where the row has no ground truth that the reward needs. A term that
    names ``on_failure`` itself gets that instead (``zero``: 0.0, ``nan``, ``raise``: the error stops
    TRL's step). The failures of each call are logged through TRL's
    ``log_metric`` as ``<name>/failed`` (a count).

    Example::

        from trl import GRPOTrainer
        from rewardhub.adapters import to_trl

        trainer = GRPOTrainer(model=..., reward_funcs=[to_trl("math_verify")], train_dataset=ds)

    :param ground_truth_key: the dataset column with the gold answer (default: the first of
        ``ground_truth``, ``solution``, ``answer``, ``reward_model`` present). A reward that takes a
        ground truth with no such column in the batch is an error naming the columns there are.
    :param term: execution-policy overrides (``timeout_s``, ``executor``, ``kwargs``, ...).
    :param remote: score on this ``rewardhub serve`` server (a URL, or ``reward.remote``'s settings)
        with its config's terms and policies, none of them installed here: ``reward`` may name one of
        its terms, whose value is given (else the server's aggregate score); a failed row is None.
    """
    from .errors import UsageError
    from .trajectory import text_view

    # on_failure drop: None, TRL's own word for "not scored"
    lazy, name = _exported("to_trl", reward, term, registry, remote, "drop")
    skip = {"trainer_state", "log_extra", "log_metric", "environments", "completion_ids"}

    def reward_func(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        runner = lazy.get()
        needs_ground_truth = lazy.first is not None and lazy.first.needs_ground_truth
        n = len(completions)
        key = ground_truth_key or next((k for k in _GT_KEYS if k in kwargs), None)
        columns = {
            k: v for k, v in kwargs.items() if k not in skip and isinstance(v, (list, tuple)) and len(v) == n
        }
        if needs_ground_truth and n and key not in columns:
            wanted = repr(ground_truth_key) if ground_truth_key else " or ".join(map(repr, _GT_KEYS))
            raise UsageError(
                f"to_trl({name!r}): the reward needs a ground truth, but TRL passed no column {wanted}"
                f"\ncolumns there: {', '.join(sorted(columns)) or 'none'}; name the right one with "
                "to_trl(..., ground_truth_key=...)"
            )
        envs = kwargs.get("environments")
        samples = []
        unusable: set[int] = set()
        for i in range(n):
            gt = columns[key][i] if key in columns else None
            if isinstance(gt, Mapping) and "ground_truth" in gt:  # verl-style reward_model column
                gt = gt["ground_truth"]
            # every column, the ground truth's too (a grader's {{ item.answer }} reads the row as it is)
            extra = {k: v[i] for k, v in columns.items() if k not in ("data_source", "extra_info")}
            if isinstance(columns.get("extra_info", [None] * n)[i], Mapping):  # verl's row format: its own
                extra.update(columns["extra_info"][i])
            sample: dict[str, Any] = {
                "prompt": _text(prompts[i]) if i < len(prompts) else None,
                "ground_truth": gt,
                "data_source": columns["data_source"][i] if "data_source" in columns else None,
                "extra_info": extra,
            }
            if envs is not None and i < len(envs):  # environment_factory's: the episode's final state
                sample["extra_info"]["environment"] = envs[i]
            if _is_chat(completions[i]):  # a conversational completion (tool calls, results): a trajectory
                head = prompts[i] if i < len(prompts) and _is_chat(prompts[i]) else [
                    {"role": "user", "content": sample["prompt"]}]
                sample["messages"] = [*head, *completions[i]]
                try:  # no assistant turn (nothing to score): this sample fails, not the batch
                    text_view(sample, i)
                except UsageError:
                    unusable.add(i)
            else:
                sample["response"] = _text(completions[i])
            samples.append(sample)
        missing = unusable | {
            i for i, s in enumerate(samples) if needs_ground_truth and s["ground_truth"] is None}
        ok = [i for i in range(n) if i not in missing]
        out: list[float | None] = [None] * n
        failed = len(missing)
        if ok:
            res = runner.score([samples[i] for i in ok])
            lazy.watch.see(res.columns)
            for k, (i, errors) in enumerate(zip(ok, res.errors)):
                out[i] = lazy.value(res, k)
                failed += bool(errors)
        log_metric = kwargs.get("log_metric")
        if callable(log_metric):
            log_metric(f"{name}/failed", float(failed))
        return out

    reward_func.__name__ = name  # TRL logs rewards under the function's name
    reward_func.__qualname__ = name
    reward_func.__doc__ = f"rewardhub reward {name!r} for TRL."
    return reward_func


def to_verl(reward: str | Mapping[str, Any] | None = None, *, registry: Any = None,
            remote: RemoteConfig | str | None = None, **term: Any) -> Any:
    """A verl ``compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs)``.

    Returns a dict (verl's naive manager puts its keys in ``reward_extra_info``, and stacks the
    same keys for every sample): ``score`` (a failed call's is what ``on_failure`` gives: 0.0 by
    default), ``acc`` (the score, as naive gives it for a plain float; None where the call
    failed), the reward's extra metrics, ``rewardhub_failed`` (1.0 or 0.0) and ``rewardhub_error``
    (the error text, or ""). Point verl's ``custom_reward_function`` at a module holding
    ``compute_score = to_verl("math_verify")``. A sample whose ground truth is None is not given to a
    rewardhub reward that takes one (it is flagged, and scored as ``on_failure`` says); a verl
    ``compute_score`` gets the None, as verl passes it. ``remote``: as :func:`to_trl`'s (a failed row
    scores 0.0).
    """
    from .errors import RewardExecutionError

    # on_failure zero: verl cannot leave a sample out; NaN would poison its group
    lazy, _ = _exported("to_verl", reward, term, registry, remote, "zero")

    def compute_score(data_source: Any, solution_str: str, ground_truth: Any, extra_info: Any = None,
                      **kwargs: Any) -> dict[str, Any]:
        sample = {"prompt": (extra_info or {}).get("prompt") if isinstance(extra_info, Mapping) else None,
                  "response": solution_str, "ground_truth": ground_truth, "data_source": data_source,
                  "extra_info": extra_info}
        raw_prompt = extra_info.get("raw_prompt") if isinstance(extra_info, Mapping) else None
        if raw_prompt is not None and not isinstance(raw_prompt, (str, Mapping)):
            # verl's agent loop: the trajectory, for a reward that reads it
            from .verl.chat import verl_chat

            sample["messages"] = verl_chat(list(raw_prompt), solution_str)
        runner = lazy.get()
        facts = lazy.first  # a verl function gets a None ground truth, as verl passes it
        if ground_truth is None and facts and facts.needs_ground_truth and facts.adapter != "verl":
            name, policy = facts.name, facts.on_failure
            if policy == "raise":
                raise RewardExecutionError(f"reward {name!r}: {_NO_GROUND_TRUTH}\n(on_failure: raise for "
                                           f"reward {name!r})", reward=name)
            value = float("nan") if policy == "nan" else 0.0
            out: dict[str, Any] = {"score": value, "acc": None, **dict.fromkeys(lazy.extra_keys)}
            return {**out, "rewardhub_failed": 1.0, "rewardhub_error": _NO_GROUND_TRUTH}
        res = runner.score([sample])
        lazy.watch.see(res.columns)
        errors = res.errors[0]
        got = lazy.value(res, 0)
        score = 0.0 if got is None else float(got)
        first: Mapping[str, Any] | None = next(iter(res.extra[0].values()), None)
        extra = dict(first or {})
        lazy.extra_keys.update(dict.fromkeys(extra))
        out = {"score": score, "acc": None if errors else score}
        out.update({k: extra.get(k) for k in lazy.extra_keys})
        out["rewardhub_failed"] = 1.0 if errors else 0.0
        out["rewardhub_error"] = "; ".join(errors.values())
        return out

    compute_score.__name__ = "compute_score"
    return compute_score
