"""Reading a grader from a file: a grader object, a ``{grader: ...}`` request body (``graders/run``,
``graders/validate``), or an RFT job file (``method.reinforcement.grader``)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from ..errors import UsageError

__all__ = ["grader_of", "read_grader_file"]


def grader_of(doc: Any, where: str) -> Any:
    """The grader object a document holds (a Vertex AI reward config read as one)."""
    from ._vertex import is_vertex
    from ._vertex import vertex_grader

    if is_vertex(doc):
        return vertex_grader(doc)
    if isinstance(doc, Mapping):
        if "type" in doc and doc.get("type") != "reinforcement":
            return doc
        method = doc.get("method")
        if (
            isinstance(method, Mapping)
            and isinstance(method.get("reinforcement"), Mapping)
            and "grader" in method["reinforcement"]
        ):
            return method["reinforcement"]["grader"]
        if "grader" in doc:
            return doc["grader"]
    raise UsageError(
        f"{where}: no grader in it; expected a grader object {{type: ...}}, {{grader: {{...}}}} or "
        "an RFT job file with method.reinforcement.grader"
    )


def read_grader_file(path: str) -> Any:
    """The grader a JSON (or YAML) file holds, not yet validated."""
    try:
        with open(os.path.expanduser(path), encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise UsageError(f"grader file {path!r} cannot be read: {exc.strerror or exc}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        if not path.endswith((".yaml", ".yml")):
            raise UsageError(
                f"grader file {path!r} is not JSON: line {exc.lineno} column {exc.colno}: {exc.msg}"
            ) from None
        import yaml

        doc = yaml.safe_load(text)
    return grader_of(doc, f"grader file {path!r}")
