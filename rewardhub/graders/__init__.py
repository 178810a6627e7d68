"""OpenAI's reinforcement fine-tuning graders (``string_check``, ``text_similarity``, ``score_model``,
``label_model``, ``python``, ``multi``) run locally as rewardhub rewards: see docs/graders.md.

Import-light: the metric libraries, aiohttp and the sandbox load when a grader first needs them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._entry import grader_file_of
from ._entry import spec_for_grader_ep
from ._files import grader_of
from ._files import read_grader_file
from ._flags import FLAGS
from ._flags import GraderError
from ._python import LIMITS as PYTHON_LIMITS
from ._python import PACKAGES_ENV
from ._python import run_python_grader
from ._run import CompiledGrader
from ._run import GraderEndpoint
from ._run import compile_grader
from ._run import sample_scope
from ._spec import TYPES
from ._spec import grader_problems
from ._terms import grader_term

__all__ = [
    "FLAGS",
    "PACKAGES_ENV",
    "PYTHON_LIMITS",
    "TYPES",
    "CompiledGrader",
    "GraderEndpoint",
    "GraderError",
    "compile_grader",
    "grader_of",
    "grader_term",
    "grader_problems",
    "read_grader_file",
    "run_answer",
    "run_python_grader",
    "sample_scope",
    "grader_file_of",
    "spec_for_grader_ep",
]


def run_answer(
    spec: Any, item: Mapping[str, Any], sample: Mapping[str, Any], endpoint: GraderEndpoint | None = None
) -> dict[str, Any]:
    """What OpenAI's ``graders/run`` answers for one (item, sample): ``reward``, ``sub_rewards``,
    ``metadata`` (``name``, ``type``, ``errors``: every flag, true where it was raised, and the
    ``*_details`` texts), and
    ``model_grader_token_usage_per_model`` (empty: not counted here)."""
    import asyncio
    import time

    grader = compile_grader(spec)
    sample = dict(sample)
    if "output_json" not in sample and isinstance(sample.get("output_text"), str):
        sample["output_json"] = sample_scope(response=sample["output_text"])["sample"]["output_json"]
    scope = sample_scope(item=item, sample=sample)
    errors: dict[str, Any] = dict.fromkeys(FLAGS, False)
    details = {
        "python_grader_server_error": "python_grader_server_error_type",
        "python_grader_runtime_error": "python_grader_runtime_error_details",
        "model_grader_server_error": "model_grader_server_error_details",
    }
    errors.update(dict.fromkeys(details.values()))
    reward, message = 0.0, None
    subs: dict[str, float] = {}
    start = time.perf_counter()
    try:
        reward, subs = asyncio.run(grader.agrade(scope, endpoint or GraderEndpoint()))
    except GraderError as exc:
        errors[exc.flag], message = True, str(exc)
        if exc.flag in details:
            errors[details[exc.flag]] = message
    meta: dict[str, Any] = {
        "name": grader.name,
        "type": grader.kind,
        "errors": errors,
        "execution_time": round(time.perf_counter() - start, 6),
        "scores": subs,
    }
    if message:
        meta["error_message"] = message
    return {"reward": reward, "sub_rewards": subs, "metadata": meta, "model_grader_token_usage_per_model": {}}
