"""``grader`` and ``model_grader``: an OpenAI RFT grader spec (``kwargs.spec``) as a reward.

A config term names one with the shorthand ``{grader: path/to/grader.json}`` or ``grader: {type: ...}``
(the loader picks ``model_grader`` where the spec calls a model). The reward is the grader's score; a
``multi`` grader's sub-graders' scores go in the row's ``extra``. A failure is the grader's error flag as
the row's error kind (``model_grader_parse_error``, ...), never a number.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING
from typing import Any

from ..decorator import reward
from ..errors import UsageError
from ..hookspecs import hookimpl
from .judge import EXPENSIVE

if TYPE_CHECKING:  # the graders package is imported when a grader first runs, not at registry build
    from ..graders import CompiledGrader

__all__ = ["grader", "model_grader"]

#: id(spec) -> (spec, compiled): a term's spec is one object for every call (kept, so its id is not reused)
_COMPILED: dict[int, tuple[Any, CompiledGrader]] = {}


def _compiled(spec: Any, grader_file: str | None = None) -> CompiledGrader:
    if spec is None:
        if not grader_file:
            raise UsageError(
                "a grader reward needs kwargs.spec (the grader object) or grader_file\n"
                "write the term as {grader: path/to/grader.json}"
            )
        return _from_file(grader_file)
    held = _COMPILED.get(id(spec))
    if held is not None and held[0] is spec:
        return held[1]
    from ..graders import compile_grader

    compiled = compile_grader(spec, "grader kwargs.spec")
    if len(_COMPILED) > 256:
        _COMPILED.clear()
    _COMPILED[id(spec)] = (spec, compiled)
    return compiled


@functools.lru_cache(maxsize=64)
def _file_grader(path: str, mtime: float) -> CompiledGrader:
    from ..graders import compile_grader
    from ..graders import read_grader_file

    return compile_grader(read_grader_file(path), f"grader file {path}")


def _from_file(path: str) -> CompiledGrader:
    try:
        mtime = os.stat(path).st_mtime
    except OSError as exc:
        raise UsageError(f"grader file {path!r} cannot be read: {exc.strerror or exc}") from None
    return _file_grader(path, mtime)


def _scope(response: str, prompt: Any, ground_truth: Any, data_source: Any, extra_info: Any,
           messages: Any) -> dict[str, Any]:
    """What a grader's templates read of one sample (``item``, ``sample``)."""
    from ..graders import sample_scope

    return sample_scope(response=response, prompt=prompt, ground_truth=ground_truth, data_source=data_source,
                        extra_info=extra_info, messages=messages)


def _value(score: float, subs: Mapping[str, float], g: CompiledGrader) -> Any:
    if subs:
        return {"score": score, **subs}
    threshold = g.spec.get("pass_threshold")
    if threshold is not None:
        return {"score": score, "passed": 1.0 if score >= threshold else 0.0}
    return score


@reward(name="grader", timeout_s=150)
def grader(
    *,
    response: str = "",
    spec: Mapping[str, Any] | None = None,
    grader_file: str | None = None,
    prompt: Any = None,
    messages: Any = None,
    extra_info: Any = None,
    data_source: Any = None,
    **kwargs: Any,
) -> Any:
    """An OpenAI RFT grader (``string_check``, ``text_similarity``, ``python``, ``multi``) as a reward.

    ``spec`` is the grader object as OpenAI documents it (or ``grader_file`` its JSON file);
    ``{{ item.x }}`` reads the row (``extra_info``'s keys, a dict ground truth's keys, ``prompt``,
    ``ground_truth``), ``{{ sample.output_text }}`` the response. Example (a term)::

        {grader: graders/exact.json}
    """
    g = _compiled(spec, grader_file)
    scope = _scope(response, prompt, kwargs.get("ground_truth"), data_source, extra_info, messages)
    score, subs = g.grade(scope)
    return _value(score, subs, g)


@reward(name="model_grader", timeout_s=300, max_concurrency=32, cache=True, capabilities=(EXPENSIVE,))
async def model_grader(
    *,
    response: str = "",
    spec: Mapping[str, Any] | None = None,
    grader_file: str | None = None,
    prompt: Any = None,
    messages: Any = None,
    extra_info: Any = None,
    data_source: Any = None,
    base_url: str | None = None,
    api_key_env: str | None = None,
    **kwargs: Any,
) -> Any:
    """An OpenAI RFT grader that calls a model (``score_model``, ``label_model``, ``cosine``) as a reward.

    The endpoint: ``base_url`` / ``api_key_env``, else ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``.
    """
    g = _compiled(spec, grader_file)
    scope = _scope(response, prompt, kwargs.get("ground_truth"), data_source, extra_info, messages)
    from ..graders import GraderEndpoint

    score, subs = await g.agrade(scope, GraderEndpoint(base_url=base_url, api_key_env=api_key_env))
    return _value(score, subs, g)


@hookimpl
def rewardhub_register_rewards() -> list[Any]:
    return [grader, model_grader]
