"""Graders by name: a package ships grader JSON files through the ``rewardhub.graders`` entry point group
(``exact = "mypkg.graders:exact"`` is ``mypkg/graders/exact.json``); each is a reward of the entry point's
name, listed with the package's dist and version, checked when the registry is built (a file that is missing
or not a valid grader is listed as broken, with its problems), never by calling a model."""

from __future__ import annotations

import os
from typing import Any

from ..errors import UsageError
from ..types import RewardSpec
from ._files import read_grader_file
from ._run import compile_grader

__all__ = ["grader_file_of", "spec_for_grader_ep"]


def grader_file_of(ep: Any) -> str | None:
    """The JSON file an entry point names, or ``None`` when its module cannot be found."""
    from .._discovery import find_module_file

    where = find_module_file(ep.module)
    if where is None:
        return None
    return os.path.join(os.path.dirname(where), f"{ep.attr or ep.name}.json")


def spec_for_grader_ep(ep: Any) -> RewardSpec:
    """The registry's spec for one ``rewardhub.graders`` entry point."""
    base = {
        "name": ep.name,
        "source": "entry-point",
        "dist": ep.dist,
        "version": ep.version,
        "plugin": ep.name,
    }
    path = grader_file_of(ep)
    if path is None:
        return RewardSpec(target=ep.value, status="broken", error=f"No module named {ep.module!r}", **base)
    try:
        grader = read_grader_file(path)
        compiled = compile_grader(grader, f"grader file {path}")
    except UsageError as exc:
        return RewardSpec(target=ep.value, status="broken", error=str(exc), **base)
    fn = "model_grader" if compiled.needs_network else "grader"
    summary = f"OpenAI grader {compiled.kind} {compiled.name!r} ({os.path.basename(path)})"
    return RewardSpec(
        target=f"rewardhub.builtin.grader:{fn}", params=(("grader_file", path),), summary=summary, **base
    )

