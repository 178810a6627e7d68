"""The records that cross between the run's processes: :class:`PromptBatch` (prompts the driver hands
a rollouter) and :class:`Rollout` (a generated batch, tagged with its policy version, that the reward
client scores, the message queue holds and the learner trains on).

Plain picklable dataclasses with no behaviour of their own beyond counting samples; the processes
(:mod:`rewardhub_trainer.actors`, :mod:`rewardhub_trainer.reward_client`) and the driver's parts
(faults, accounting, evaluation) import them from here. Nothing here imports Ray or torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field
from typing import Any

__all__ = ["PromptBatch", "Rollout"]


@dataclass
class PromptBatch:
    """The prompts of one step, in the run's data order."""

    index: int  #: position in the run's data order
    prompts: list[Any]  #: data.Prompt
    dataset_indices: list[int]


@dataclass
class Rollout:
    """One generated batch: ``prompts_per_step`` groups of ``n`` completions."""

    batch: PromptBatch
    #: the weights that generated it, tagged by the trainer step that produced them (staleness is
    #: counted in steps; the metrics' ``policy_version`` is the optimizer updates of those weights)
    version: int
    groups: list[list[Any]]  #: engine.Completion
    gen_s: float
    rollouter_pid: int
    rewards: list[list[float]] | None = None
    terms: list[list[dict[str, float]]] | None = None
    reward_metrics: dict[str, float] = field(default_factory=dict)
    score_s: float = 0.0
    reward_pids: list[int] = field(default_factory=list)  #: the reward workers that scored it
    threads: float = 0.0  #: the rollouter's mean torch threads while generating it (0: not counted)
    #: reward term -> (samples it failed on, samples it applied to, its last error's first line)
    reward_failures: dict[str, tuple[int, int, str]] = field(default_factory=dict)
    #: lines for the user from its scoring (a hung reward worker restarted): the driver prints them
    reward_notes: list[str] = field(default_factory=list)

    @property
    def num_samples(self) -> int:
        return sum(len(g) for g in self.groups)
