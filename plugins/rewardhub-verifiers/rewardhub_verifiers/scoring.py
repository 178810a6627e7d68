"""Scoring with a verifiers environment's own reward methods (``verifiers.v1``, 0.4).

A sample reaches the environment as a verifiers trace: the one its ``extra_info["trace"]`` holds (a
whole ``traces.jsonl`` line, or one trace of it: the environment's own rollout), else one built from its
``messages`` (or ``prompt`` and ``response``) with the task's data from ``extra_info["task"]``
(``ground_truth`` fills a task field named ``answer`` when that is not given).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping
from typing import Any

__all__ = ["score_reward", "score_rubric"]

#: the environments whose skipped rewards this process has named (said once, not once a row)
_told: set[str] = set()


@functools.cache
def _task_type(env: str) -> Any:
    try:
        import verifiers.v1 as vf
    except ImportError as e:
        raise RuntimeError(f"verifiers.{env}: verifiers is not importable here ({e}); install "
                           "rewardhub-verifiers[verifiers] or verifiers>=0.4 beside it") from None
    return vf.task_type(env)


def _message(m: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAI chat message as verifiers reads it (tool calls flat: id, name, arguments)."""
    out = dict(m)
    if out.get("tool_calls"):
        out["tool_calls"] = [
            {"id": c.get("id"), "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
            if isinstance(c.get("function"), Mapping) else c
            for c in out["tool_calls"]
        ]
    return out


def _task_trace(env: str, messages: Any, extra_info: Any, fields: Mapping[str, Any]) -> tuple[Any, Any]:
    """Environment ``env``'s task and trace of one sample."""
    task_cls = _task_type(env)
    trace = _trace(task_cls, fields.get("prompt"), fields.get("response"), fields.get("ground_truth"),
                   extra_info, messages)
    return task_cls(trace.task.data), trace


def _trace(task_cls: Any, prompt: Any, response: Any, ground_truth: Any, extra_info: Any,
           messages: Any) -> Any:
    from pydantic import TypeAdapter
    from verifiers.v1 import AgentConfig
    from verifiers.v1 import Message
    from verifiers.v1 import Trace
    from verifiers.v1.graph import MessageNode
    from verifiers.v1.trace import AgentInfo
    from verifiers.v1.trace import TraceTask

    data_cls = task_cls.data_type()
    extra = extra_info if isinstance(extra_info, Mapping) else {}
    given = extra.get("trace")
    if isinstance(given, Mapping) and isinstance(given.get("traces"), list) and "nodes" not in given:
        if len(given["traces"]) != 1:  # a whole traces.jsonl line (an episode): its one trace
            raise ValueError(f"extra_info.trace is a traces.jsonl line with {len(given['traces'])} traces (a "
                             "multi-agent rollout); put the one trace to score in extra_info.trace")
        given = given["traces"][0]
    if isinstance(given, Mapping):
        trace = Trace[data_cls].model_validate(given)
        trace.rewards, trace.metrics = {}, {}
        return trace
    fields = dict(extra.get("task") or {})
    if "answer" in data_cls.model_fields and "answer" not in fields and ground_truth is not None:
        fields["answer"] = ground_truth
    if messages is None:
        text = prompt if isinstance(prompt, str) else None
        messages = [*(prompt if isinstance(prompt, list) else [{"role": "user", "content": text}]),
                    {"role": "assistant", "content": response or ""}]
    fields.setdefault("prompt", next((m.get("content") for m in messages if m.get("role") == "user"), None))
    as_message = TypeAdapter(Message).validate_python
    nodes = [MessageNode(parent=i - 1 if i else None, message=as_message(_message(m)),
                         sampled=m.get("role") == "assistant") for i, m in enumerate(messages)]
    data = data_cls.model_validate(fields)
    return Trace(task=TraceTask(type=task_cls.__name__, data=data), agent=AgentInfo(config=AgentConfig()),
                 nodes=nodes)


async def score_reward(messages: Any = None, extra_info: Any = None, *, env: str, reward: str,
                       **fields: Any) -> float:
    """One ``@vf.reward`` of environment ``env``, unweighted, as the environment computes it (a trajectory
    reward: a text sample comes as one user and one assistant turn; ``fields`` takes the ground truth,
    which is optional)."""
    task, trace = _task_trace(env, messages, extra_info, fields)
    hooks = {fn.__name__: fn for fn in task.hooks("reward")}
    if reward not in hooks:
        raise ValueError(f"verifiers.{env} has no reward {reward!r}; its rewards: {', '.join(sorted(hooks))}")
    fn = hooks[reward]
    if _needs_runtime(fn):
        raise ValueError(f"verifiers.{env}.{reward} needs the environment's runtime (a sandbox); it can "
                         "only be scored inside a verifiers rollout")
    from verifiers.v1.utils.decorators import invoke

    value = await invoke(fn, {"task": task.data, "trace": trace})
    if isinstance(value, Mapping):
        raise ValueError(f"verifiers.{env}.{reward} returned keyed scores {sorted(value)}; use "
                         f"verifiers.{env} for the rubric's total")
    return float(value)


def _needs_runtime(fn: Any) -> bool:
    """Whether a reward (or judge) cannot be called without the environment's runtime (as ``Task.score``
    decides: a ``runtime`` parameter with no default)."""
    param = inspect.signature(fn).parameters.get("runtime")
    return param is not None and param.default is inspect.Parameter.empty


def _offline_rewards(env: str, task: Any) -> None:
    """Refuse a rubric with no reward it can score offline (its total would be an empty sum, 0.0, for
    every row); name once the rewards it skips when it has others."""
    names = [(fn.__name__, fn) for fn in task.hooks("reward")]
    names += [(judge.reward_name, judge.score) for judge in task.plugged_judges()]
    skipped = sorted(name for name, fn in names if _needs_runtime(fn))
    if not skipped:
        return
    if len(skipped) == len(names):
        raise ValueError(f"verifiers.{env}: none of its rewards can be scored offline ({', '.join(skipped)} "
                         "need the environment's runtime, a sandbox): its rubric would score 0.0 on every "
                         "row; score it inside a verifiers rollout, or name a reward that needs no runtime")
    if env not in _told:
        _told.add(env)
        import sys

        print(f"WARNING: verifiers.{env}: its rubric leaves out {', '.join(skipped)} (they need the "
              "environment's runtime, a sandbox): the total is the weighted sum of the other rewards only",
              file=sys.stderr, flush=True)


async def score_rubric(messages: Any = None, extra_info: Any = None, *, env: str,
                       **fields: Any) -> float:
    """The environment's rubric: every reward it can score offline, weighted and summed, as
    ``Task.score`` computes it (``trace.reward``); an error when it has no such reward, and a
    ``WARNING:`` line (once a process) naming those it leaves out when it has some."""
    task, trace = _task_trace(env, messages, extra_info, fields)
    _offline_rewards(env, task)
    await task.score(trace)
    missing = sorted(name for name, r in trace.rewards.items() if r is None)
    if missing:
        raise ValueError(f"verifiers.{env}: rewards {missing} were not scored")
    return float(trace.reward)
