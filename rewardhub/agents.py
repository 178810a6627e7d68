"""Scoring an agent's steps and its finished episode through the registry, from inside OpenRLHF's agent
API (``AgentInstanceBase``: ``reset`` once, then ``step`` per model turn).

OpenRLHF hands ``step`` the model's turn as text and takes back ``rewards``, ``scores``,
``environment_feedback`` and ``done``. An :class:`Episode` keeps the conversation as chat messages (the
model's turns, hermes tool calls read as ``tool_calls``, the environment's results as ``tool``
messages), scores it with a registry reward (a trajectory reward reads it whole, a text reward its last
reply) and answers in OpenRLHF's shape::

    from openrlhf.utils.agent import AgentInstanceBase
    from rewardhub.agents import Episode

    class AgentInstance(AgentInstanceBase):
        async def reset(self, states, **kwargs):
            self.episode = Episode("tool_call_format", states["observation"], states["label"])
            return {"observation": states["observation"]}

        async def step(self, states, **kwargs):
            results, done = my_tools(states["action_text"])
            return await self.episode.step(states["action_text"], results, done, feedback=render(results))
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Any

from .trajectory import hermes_message

if TYPE_CHECKING:
    from .execution import Scorer

__all__ = ["Episode"]

_runners: dict[str, Scorer] = {}
_lock = threading.Lock()


def _runner(term: Mapping[str, Any]) -> Scorer:
    """One scorer per term for the process (every episode of an agent shares it)."""
    key = json.dumps(term, sort_keys=True, default=str)
    with _lock:
        if key not in _runners:
            from .scorers import open_scorer

            _runners[key] = open_scorer({"rewards": [dict(term)]}, check=False)
        return _runners[key]


class Episode:
    """One agent episode: its conversation, scored by ``reward`` when it ends and by ``step_reward``
    (if given) after every other step.

    :param reward: a registry name or a config term (``{"name": ..., "kwargs": ...}``).
    :param prompt: the episode's first observation (the user turn), or its chat messages.
    :param label: the ground truth.
    """

    def __init__(self, reward: str | Mapping[str, Any], prompt: str | Sequence[Mapping[str, Any]],
                 label: Any = None, *, step_reward: str | Mapping[str, Any] | None = None) -> None:
        self.messages: list[dict[str, Any]] = (
            [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [dict(m) for m in prompt])
        self.label = label
        self._terms = [{"on_failure": "zero", **({"name": r} if isinstance(r, str) else r)}
                       for r in (reward, step_reward) if r is not None]

    async def score(self, final: bool = True) -> tuple[float, dict[str, float]]:
        """The conversation so far, scored by the episode's reward (``final``) or its step reward;
        and OpenRLHF ``extra_logs`` (each term's value, ``rewardhub_failed``)."""
        import asyncio

        sample = {"messages": self.messages, "ground_truth": self.label, "data_source": None,
                  "extra_info": {}}
        res = await asyncio.to_thread(_runner(self._terms[0 if final else 1]).score, [sample])
        logs = {k: float(v) for k, v in res.rewards[0].items() if v is not None}
        logs["rewardhub_failed"] = float(bool(res.errors[0]))
        return float(res.scores[0] or 0.0), logs

    async def step(self, action_text: str, results: Sequence[str] = (), done: bool = False, *,
                   feedback: str = "") -> dict[str, Any]:
        """Take one model turn and the tool results it got; OpenRLHF's ``step`` answer: the episode's
        reward when ``done``, the step reward (0.0 without one) before."""
        import torch

        self.messages.append(hermes_message(action_text))
        self.messages += [{"role": "tool", "content": r} for r in results]
        scored = done or len(self._terms) > 1
        reward, logs = await self.score(final=done) if scored else (0.0, {})
        return {"rewards": torch.tensor(reward), "scores": torch.tensor(reward),
                "environment_feedback": feedback, "done": done, "extra_logs": logs}
