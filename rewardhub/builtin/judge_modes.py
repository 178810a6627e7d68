"""Registers the judging modes' rewards (a built-in plugin module, see ``DEFAULT_PLUGINS``)."""

from __future__ import annotations

from typing import Any

from ..hookspecs import hookimpl

__all__: list[str] = []


@hookimpl
def rewardhub_register_rewards() -> list[Any]:
    from .judging.pairwise import llm_judge_pairwise
    from .judging.rubric import llm_judge_rubric
    from .judging.rubric import llm_judge_sampled

    return [llm_judge_pairwise, llm_judge_rubric, llm_judge_sampled]
