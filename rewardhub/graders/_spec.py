"""Validating a grader spec (OpenAI's ``string_check``, ``text_similarity``, ``score_model``,
``label_model``, ``python``, ``multi``) before anything runs: one line per problem, each naming the field
and what it should be."""

from __future__ import annotations

import difflib
import numbers
from collections.abc import Mapping
from typing import Any

from ._flags import GraderError
from ._formula import Formula
from ._template import check_template

__all__ = ["MAX_PYTHON_SOURCE", "METRICS", "OPERATIONS", "TYPES", "grader_problems"]

OPERATIONS = ("eq", "ne", "neq", "like", "ilike")
METRICS = (
    "fuzzy_match",
    "bleu",
    "gleu",
    "meteor",
    "cosine",
    "rouge_1",
    "rouge_2",
    "rouge_3",
    "rouge_4",
    "rouge_5",
    "rouge_l",
)
#: the source limit of OpenAI's python grader
MAX_PYTHON_SOURCE = 256 * 1024
_COMMON = ("type", "name")
_KEYS: dict[str, tuple[str, ...]] = {
    "string_check": ("input", "reference", "operation"),
    "text_similarity": (
        "input",
        "reference",
        "evaluation_metric",
        "pass_threshold",
        "model",
        "base_url",
        "api_key_env",
    ),
    "score_model": (
        "input",
        "model",
        "range",
        "sampling_params",
        "pass_threshold",
        "base_url",
        "api_key_env",
    ),
    "label_model": (
        "input",
        "model",
        "labels",
        "passing_labels",
        "sampling_params",
        "base_url",
        "api_key_env",
    ),
    "python": ("source", "image_tag", "pass_threshold"),
    "multi": ("graders", "calculate_output"),
    "vertex": ("config",),  # a Vertex AI reward config, read by _vertex (not an OpenAI type)
}
TYPES = tuple(_KEYS)
#: the key of a text grader that picks how the texts are compared, and its values
_CHOICE = {"string_check": ("operation", OPERATIONS), "text_similarity": ("evaluation_metric", METRICS)}
_SAMPLING = (
    "temperature",
    "top_p",
    "seed",
    "max_completions_tokens",
    "max_completion_tokens",
    "max_tokens",
    "reasoning_effort",
)


def _is_num(x: Any) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def _unknown(spec: Mapping[str, Any], allowed: tuple[str, ...], at: str) -> list[str]:
    out = []
    for key in spec:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            out.append(f"{at}{key}: not a key of this grader{hint}; allowed: {', '.join(allowed)}")
    return out


def _text_field(spec: Mapping[str, Any], key: str, at: str) -> list[str]:
    if key not in spec:
        return [f"{at}{key}: missing; a string (it may hold {{{{ item.x }}}} / {{{{ sample.output_text }}}})"]
    if not isinstance(spec[key], str):
        return [f"{at}{key}: {type(spec[key]).__name__} {spec[key]!r}, not a string"]
    return check_template(spec[key], f"{at}{key}")


def _choice(spec: Mapping[str, Any], key: str, allowed: tuple[str, ...], at: str) -> list[str]:
    if spec.get(key) in allowed:
        return []
    got = "missing" if key not in spec else f"{spec[key]!r} is not valid"
    return [f"{at}{key}: {got}; use one of {', '.join(allowed)}"]


def _messages(spec: Mapping[str, Any], at: str) -> list[str]:
    msgs = spec.get("input")
    if not isinstance(msgs, list) or not msgs:
        return [
            f"{at}input: {'missing' if msgs is None else repr(msgs)[:60]}; a list of messages "
            "[{role, content}], content a string that may hold {{ item.x }} / {{ sample.output_text }}"
        ]
    out = []
    for j, m in enumerate(msgs):
        where = f"{at}input[{j}]"
        if not isinstance(m, Mapping) or "content" not in m:
            out.append(f"{where}: {repr(m)[:60]} is not a message {{role, content}}")
            continue
        if m.get("role", "user") not in ("system", "developer", "user", "assistant"):
            out.append(f"{where}.role: {m.get('role')!r}; use system, developer, user or assistant")
        content = m["content"]
        parts = content if isinstance(content, list) else [content]
        for p in parts:
            text = p.get("text") if isinstance(p, Mapping) else p
            if isinstance(text, str):
                out += check_template(text, f"{where}.content")
            elif not (
                isinstance(p, Mapping) and p.get("type") in ("input_image", "image_url", "input_audio")
            ):
                out.append(f"{where}.content: {repr(p)[:60]} is not text or a content part with text")
    return out


def _model_grader(spec: Mapping[str, Any], at: str) -> list[str]:
    out = _messages(spec, at)
    if not isinstance(spec.get("model"), str) or not spec.get("model"):
        out.append(
            f"{at}model: {'missing' if 'model' not in spec else repr(spec['model'])}; the model's name "
            "at the endpoint (a string)"
        )
    sp = spec.get("sampling_params")
    if sp is not None:
        if not isinstance(sp, Mapping):
            out.append(f"{at}sampling_params: {sp!r} is not a mapping")
        else:
            out += _unknown(sp, _SAMPLING, f"{at}sampling_params.")
    for key in ("base_url", "api_key_env"):
        if key in spec and not isinstance(spec[key], str):
            out.append(f"{at}{key}: {spec[key]!r} is not a string")
    return out


def _range(spec: Mapping[str, Any], at: str) -> list[str]:
    r = spec.get("range", [0, 1])
    if not (isinstance(r, (list, tuple)) and len(r) == 2 and all(map(_is_num, r)) and r[0] < r[1]):
        return [f"{at}range: {r!r}; use [low, high] with low < high (default [0, 1])"]
    return []


def _labels(spec: Mapping[str, Any], at: str) -> list[str]:
    labels, passing = spec.get("labels"), spec.get("passing_labels")
    out = []
    if not (isinstance(labels, list) and labels and all(isinstance(x, str) for x in labels)):
        out.append(
            f"{at}labels: {'missing' if labels is None else repr(labels)[:60]}; a list of label strings"
        )
        labels = []
    if not (isinstance(passing, list) and passing and all(isinstance(x, str) for x in passing)):
        out.append(
            f"{at}passing_labels: {'missing' if passing is None else repr(passing)[:60]}; a list of "
            "labels (a subset of labels)"
        )
    elif labels and not set(passing) <= set(labels):
        out.append(f"{at}passing_labels: {sorted(set(passing) - set(labels))} not in labels {labels}")
    return out


def _python(spec: Mapping[str, Any], at: str) -> list[str]:
    src = spec.get("source")
    if not isinstance(src, str) or not src.strip():
        return [
            f"{at}source: {'missing' if src is None else repr(src)[:60]}; Python source defining "
            "grade(sample, item) -> float"
        ]
    size = len(src.encode())
    if size > MAX_PYTHON_SOURCE:
        return [f"{at}source: {size:,} bytes, over the {MAX_PYTHON_SOURCE:,}-byte (256 kB) limit"]
    try:
        import ast

        tree = ast.parse(src)
    except SyntaxError as exc:
        return [f"{at}source: not valid Python (line {exc.lineno}: {exc.msg})"]
    if not any(isinstance(n, ast.FunctionDef) and n.name == "grade" for n in tree.body):
        return [f"{at}source: defines no top-level grade(sample, item)"]
    return []


def _multi(spec: Mapping[str, Any], at: str, depth: int) -> list[str]:
    graders = spec.get("graders")
    out = []
    if not isinstance(graders, Mapping) or not graders:
        out.append(
            f"{at}graders: {'missing' if graders is None else repr(graders)[:60]}; a mapping "
            "{name: grader} of the sub-graders calculate_output names"
        )
        graders = None
    for name, sub in (graders or {}).items():
        if isinstance(sub, Mapping) and sub.get("type") == "multi":
            out.append(f"{at}graders.{name}.type: a multi grader cannot hold another multi grader")
        else:
            out += grader_problems(sub, f"{at}graders.{name}.", depth + 1)
    try:
        formula = Formula(spec.get("calculate_output", ""))
    except GraderError as exc:
        return [*out, f"{at}calculate_output: {exc}"]
    missing = sorted(formula.names - set(graders or ()))
    if graders is not None and missing:
        out.append(
            f"{at}calculate_output: names {', '.join(missing)}, which is no sub-grader; the sub-graders "
            f"are {', '.join(map(str, graders))}"
        )
    return out


def grader_problems(spec: Any, at: str = "", depth: int = 0) -> list[str]:
    """Every problem with a grader spec, one line each (``[]``: valid)."""
    if not isinstance(spec, Mapping):
        return [
            f"{at or 'grader'}: {type(spec).__name__} {repr(spec)[:60]}, not a grader object {{type: ...}}"
        ]
    if depth > 8:
        return [f"{at}: graders nest over 8 deep"]
    kind = spec.get("type")
    if kind not in _KEYS:
        return [
            f"{at}type: {'missing' if kind is None else repr(kind) + ' is not a grader type'}; use one of "
            f"{', '.join(TYPES)}"
        ]
    out = _unknown(spec, (*_COMMON, *_KEYS[kind]), at)
    if "name" in spec and not isinstance(spec["name"], str):
        out.append(f"{at}name: {spec['name']!r} is not a string")
    if "pass_threshold" in spec and not _is_num(spec["pass_threshold"]):
        out.append(f"{at}pass_threshold: {spec['pass_threshold']!r} is not a number")
    if kind in ("string_check", "text_similarity"):
        out += _text_field(spec, "input", at) + _text_field(spec, "reference", at)
        out += _choice(spec, *_CHOICE[kind], at)
    elif kind == "score_model":
        out += _model_grader(spec, at) + _range(spec, at)
    elif kind == "label_model":
        out += _model_grader(spec, at) + _labels(spec, at)
    elif kind == "python":
        out += _python(spec, at)
    elif kind == "vertex":
        from ._vertex import vertex_problems

        out += vertex_problems(spec.get("config"), at)
    else:
        out += _multi(spec, at, depth)
    return out
