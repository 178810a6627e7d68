"""Running a validated grader on one (item, sample): a compiled tree of the grader's parts, evaluated
without network for the deterministic types and through ``_model`` for the model-backed ones."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import Any

from ..errors import UsageError
from ._flags import GraderError
from ._formula import Formula
from ._spec import grader_problems
from ._template import render_template
from ._text import similarity
from ._text import string_check

__all__ = ["CompiledGrader", "GraderEndpoint", "compile_grader", "sample_scope"]

_NETWORK = ("score_model", "label_model")


@dataclass(frozen=True)
class GraderEndpoint:
    """Where the model-backed graders call: the term's ``base_url`` / ``api_key_env``, else
    ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` (as OpenAI's SDK reads them)."""

    base_url: str | None = None
    api_key_env: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class CompiledGrader:
    """One grader of a spec (and its sub-graders), checked once; ``grade`` / ``agrade`` per sample."""

    spec: Mapping[str, Any]
    kind: str
    name: str
    subs: dict[str, CompiledGrader] = field(default_factory=dict)
    formula: Formula | None = None
    metric: Any = None

    @property
    def needs_network(self) -> bool:
        """Whether it calls a model endpoint (a model grader or ``cosine``, here or in a sub-grader)."""
        return (
            (self.kind == "vertex" and self.spec["config"].get("autorater_scorer") is not None)
            or self.kind in _NETWORK
            or self.spec.get("evaluation_metric") == "cosine"
            or any(s.needs_network for s in self.subs.values())
        )

    def grade(self, scope: Mapping[str, Any]) -> tuple[float, dict[str, float]]:
        """The score and the sub-graders' scores, for the deterministic types (and ``python``)."""
        s = self.spec
        if self.kind == "string_check" or (self.kind == "text_similarity" and self.metric is not None):
            text, ref = render_template(s["input"], scope), render_template(s["reference"], scope)
            if self.metric is None:
                return string_check(s["operation"], text, ref), {}
            return _checked(self.metric(text, ref)), {}
        if self.kind == "vertex" and not self.needs_network:
            from ._vertex import vertex_score

            return vertex_score(self.spec["config"], scope), {}
        if self.kind == "python":
            from ._python import run_python_grader

            return run_python_grader(self.spec, scope), {}
        if self.kind == "multi":
            values = {name: sub.grade(scope)[0] for name, sub in self.subs.items()}
            return self.formula(values), values  # type: ignore[misc]
        import asyncio

        return asyncio.run(self.agrade(scope, GraderEndpoint()))

    async def agrade(self, scope: Mapping[str, Any],
                     endpoint: GraderEndpoint) -> tuple[float, dict[str, float]]:
        """:meth:`grade`, with the model-backed types asked over HTTP (sub-graders at once)."""
        if self.kind == "multi":
            import asyncio

            names = list(self.subs)
            got = await asyncio.gather(*(self.subs[n].agrade(scope, endpoint) for n in names))
            values = {n: g[0] for n, g in zip(names, got)}
            return self.formula(values), values  # type: ignore[misc]
        if not self.needs_network:
            if self.kind in ("python", "vertex"):
                import asyncio

                return await asyncio.to_thread(self.grade, scope)
            return self.grade(scope)
        if self.kind == "vertex":
            from ._vertex import ask_autorater

            return await ask_autorater(self.spec["config"], scope, endpoint), {}
        from ._model import ask_grader

        return await ask_grader(self.spec, scope, endpoint), {}


def _checked(x: float) -> float:
    x = float(x)
    if not math.isfinite(x):
        raise GraderError("other_error", f"the metric gave {x}")
    return x


def compile_grader(spec: Any, where: str = "grader") -> CompiledGrader:
    """A checked grader; a :class:`UsageError` with one line per problem when ``spec`` is not valid."""
    problems = grader_problems(spec)
    if problems:
        raise UsageError(
            f"{where} is not a valid grader ({len(problems)} problem"
            f"{'s' if len(problems) > 1 else ''}):\n" + "\n".join(f"  {p}" for p in problems)
        )
    return _compile(spec)


def _compile(spec: Mapping[str, Any], name: str = "") -> CompiledGrader:
    kind = spec["type"]
    out = CompiledGrader(spec=spec, kind=kind, name=str(spec.get("name") or name or kind))
    if kind == "multi":
        out.subs = {str(n): _compile(s, str(n)) for n, s in spec["graders"].items()}
        out.formula = Formula(spec["calculate_output"])
    elif kind == "text_similarity" and spec["evaluation_metric"] != "cosine":
        out.metric = similarity(spec["evaluation_metric"])
    return out


class _Lazy:
    """``sample.output_json``: parsed on first use; a :class:`GraderError` when the output is not JSON."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __call__(self) -> Any:
        try:
            return json.loads(self.text)
        except (json.JSONDecodeError, TypeError):
            raise GraderError(
                "sample_parse_error", f"sample.output_json: the output is not JSON: {self.text[:120]!r}"
            ) from None


def sample_scope(
    *,
    response: Any = None,
    prompt: Any = None,
    ground_truth: Any = None,
    data_source: Any = None,
    extra_info: Any = None,
    messages: Any = None,
    item: Mapping[str, Any] | None = None,
    sample: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``item`` and ``sample`` namespaces of a rewardhub sample (or given as they are).

    ``item`` is the row: ``extra_info``'s keys, a dict ``ground_truth``'s keys, and ``prompt``,
    ``ground_truth``, ``data_source``. ``sample`` has ``output_text`` (the response), ``output_json``
    (it parsed), ``output_tools`` (a trajectory's tool calls) and ``choices``.
    """
    if item is None:
        row: dict[str, Any] = {"prompt": prompt, "ground_truth": ground_truth, "data_source": data_source}
        if isinstance(ground_truth, Mapping):
            row.update(ground_truth)
        if isinstance(extra_info, Mapping):
            row.update(extra_info)
        item = row
    if sample is None:
        text = "" if response is None else str(response)
        tools: list[Any] = []
        if messages:
            from ..trajectory import replies_of
            from ..trajectory import tool_calls_of

            tools = tool_calls_of(replies_of(messages))
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if tools:
            message["tool_calls"] = tools
        sample = {
            "output_text": text,
            "output_json": _Lazy(text),
            "output_tools": tools,
            "choices": [{"index": 0, "finish_reason": "stop", "message": message}],
        }
    return {"item": item, "sample": sample}
