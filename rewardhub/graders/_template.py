"""Grader templating: ``{{ item.x }}`` and ``{{ sample.output_text }}`` with JSON-path access
(``{{ sample.output_tools[0].function.name }}``), as OpenAI's graders guide describes it."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from ._flags import GraderError

__all__ = [
    "NAMESPACES",
    "SAMPLE_FIELDS",
    "check_template",
    "lookup",
    "parse_path",
    "render_template",
    "template_paths",
]

NAMESPACES = ("item", "sample")
#: what the sample namespace holds (OpenAI's graders guide)
SAMPLE_FIELDS = ("output_text", "output_json", "output_tools", "choices", "output_audio")
_SLOT = re.compile(r"\{\{\s*(.*?)\s*\}\}")
_STEP = re.compile(r"\.([A-Za-z_][\w-]*)|\[\s*(\d+)\s*\]|\[\s*['\"]([^'\"]*)['\"]\s*\]")
_HEAD = re.compile(r"([A-Za-z_]\w*)")


def parse_path(path: str) -> list[str | int] | None:
    """``item.a[0].b`` as ``['item', 'a', 0, 'b']``; ``None`` when it is not a path."""
    m = _HEAD.match(path)
    if not m:
        return None
    steps: list[str | int] = [m.group(1)]
    pos = m.end()
    while pos < len(path):
        s = _STEP.match(path, pos)
        if not s:
            return None
        name, index, quoted = s.groups()  # .name, [0] or ['key']
        steps.append(name if name is not None else int(index) if index is not None else quoted)
        pos = s.end()
    return steps


def template_paths(text: str) -> list[str]:
    """The variable paths a template names, in order."""
    return [m.group(1) for m in _SLOT.finditer(text)]


def check_template(text: str, where: str) -> list[str]:
    """Problems with a template's variables (namespace, syntax), each naming ``where``."""
    problems = []
    for path in template_paths(text):
        steps = parse_path(path)
        if steps is None:
            problems.append(
                f"{where}: '{{{{ {path} }}}}' is not a variable path; write e.g. "
                "{{ item.answer }} or {{ sample.output_json.field[0] }}"
            )
        elif steps[0] == "sample" and len(steps) > 1 and steps[1] not in SAMPLE_FIELDS:
            problems.append(
                f"{where}: '{{{{ {path} }}}}': sample has no {steps[1]!r}; it has {', '.join(SAMPLE_FIELDS)}"
            )
        elif steps[0] not in NAMESPACES or len(steps) < 2:
            problems.append(
                f"{where}: '{{{{ {path} }}}}' names no variable of item or sample; the only "
                "namespaces are item (the dataset row) and sample (the model's output)"
            )
    return problems


def lookup(scope: Mapping[str, Any], path: str) -> Any:
    """The value at ``path`` in ``scope`` (``{'item': ..., 'sample': ...}``)."""
    steps = parse_path(path)
    if steps is None or steps[0] not in NAMESPACES:
        raise GraderError("invalid_variable_error", f"'{{{{ {path} }}}}' is not a variable of item or sample")
    node: Any = scope
    for k, step in enumerate(steps):
        try:
            if isinstance(step, int) and isinstance(node, Sequence) and not isinstance(node, str):
                node = node[step]
            elif isinstance(node, Mapping):
                node = node[step]
            else:
                raise KeyError(step)
        except (KeyError, IndexError, TypeError):
            got = ".".join(map(str, steps[:k])) or "the scope"
            have = ", ".join(map(str, node)) if isinstance(node, Mapping) else type(node).__name__
            raise GraderError(
                "invalid_variable_error",
                f"'{{{{ {path} }}}}': {got} has no {step!r} (it has: {have or 'nothing'})",
            ) from None
        if callable(node):  # a value made on first use (sample.output_json parses then)
            node = node()
    return node


def as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def render_template(text: str, scope: Mapping[str, Any]) -> str:
    """``text`` with every ``{{ path }}`` replaced (strings as they are, other values as JSON)."""
    if "{{" not in text:
        return text
    return _SLOT.sub(lambda m: as_text(lookup(scope, m.group(1))), text)
