"""The pluggy plugin: one reward per ``@vf.reward`` method of every installed verifiers environment.

An environment is found by its metadata and its source (no import: verifiers takes seconds to import,
and ``rewardhub list`` must stay fast; see :mod:`rewardhub_verifiers._scan`), so a reward defined outside
the package's own files is not listed here, and a weight that is not a literal is listed as set at run
time; :mod:`rewardhub_verifiers.scoring` always calls the environment's own methods. An environment
that cannot be read is listed as broken, with its package and the error; the others are listed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from typing import Any

from rewardhub import RewardSpec
from rewardhub import hookimpl
from rewardhub.types import ExecutionPolicy

if TYPE_CHECKING:
    from ._scan import Environment

__all__ = ["environments", "rewardhub_register_rewards"]

_POLICY = ExecutionPolicy(timeout_s=60.0)


def environments() -> list[Environment]:
    """The installed verifiers environments, each with its rewards or the error that hides them."""
    import importlib.util

    if importlib.util.find_spec("verifiers") is None:  # none can be scored: the scanner is not imported
        return []
    from ._scan import scan

    return scan()


def _w(weight: float | None) -> str:
    return "set at run time" if weight is None else f"{weight:g}"


@hookimpl
def rewardhub_register_rewards() -> list[RewardSpec]:
    specs = []
    for env in environments():
        # trajectory: the rewards read the conversation (messages=), as the loaded target's signature says
        common: dict[str, Any] = dict(source="plugin", dist=env.dist, version=env.version, policy=_POLICY,
                                      plugin="verifiers", capabilities=("async", "trajectory"))
        rubric = dict(name=f"verifiers.{env.module}", target="rewardhub_verifiers.scoring:score_rubric",
                      params=(("env", env.module),), **common)
        if env.error:
            specs.append(RewardSpec(
                status="broken", error=f"verifiers environment {env.module!r} of {env.dist} {env.version}: "
                f"{env.error}", **rubric))
            continue
        weights = ", ".join(f"{name} x{_w(w)}" for name, w in sorted(env.rewards.items()))
        notes = "".join(f"; {note}" for note in env.notes)
        specs.append(RewardSpec(
            summary=f"verifiers environment {env.module!r}: its rubric's weighted sum ({weights}){notes}",
            **rubric))
        for reward, weight in sorted(env.rewards.items()):
            specs.append(RewardSpec(
                name=f"verifiers.{env.module}.{reward}", target="rewardhub_verifiers.scoring:score_reward",
                params=(("env", env.module), ("reward", reward)),
                summary=f"verifiers environment {env.module!r}: its {reward!r} reward (rubric weight "
                        f"{_w(weight)})",
                **common))
    return specs
