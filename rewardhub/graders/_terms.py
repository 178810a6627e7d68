"""The config shorthand: a term ``{grader: path/to/grader.json}`` or ``{grader: {type: ...}}`` becomes a
term of the ``grader`` reward (``model_grader`` where the spec calls a model), checked before anything
runs."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ..errors import UsageError
from ._files import grader_of
from ._files import read_grader_file
from ._run import compile_grader

__all__ = ["ENDPOINT_KEYS", "grader_term"]

#: term keys beside ``grader`` that go to the reward's kwargs (the model graders' endpoint)
ENDPOINT_KEYS = ("base_url", "api_key_env")


def grader_term(term: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The plain term a grader shorthand stands for."""
    raw = term["grader"]
    stem = None
    if isinstance(raw, str):
        spec = read_grader_file(raw)
        stem = os.path.splitext(os.path.basename(raw))[0]
    elif isinstance(raw, Mapping):
        spec = grader_of({k: raw[k] for k in raw}, f"{where}.grader")
    else:
        raise UsageError(
            f"{where}.grader: {type(raw).__name__} {raw!r}; give a grader file's path or the "
            "grader object {type: ...}"
        )
    if "name" in term or "path" in term or "module" in term:
        key = next(k for k in ("name", "path", "module") if k in term)
        raise UsageError(
            f"{where}: a grader term has no {key!r} (its reward is the grader)\n"
            "name its output with alias: NAME"
        )
    compiled = compile_grader(spec, f"{where}.grader")
    kwargs = dict(term.get("kwargs") or {})
    kwargs["spec"] = spec
    for key in ENDPOINT_KEYS:
        if term.get(key) is not None:
            kwargs[key] = term[key]
    out = {k: v for k, v in term.items() if k not in ("grader", "kwargs", *ENDPOINT_KEYS)}
    out["name"] = "model_grader" if compiled.needs_network else "grader"
    out.setdefault("alias", spec.get("name") or stem or "grader")
    out["kwargs"] = kwargs
    return out
