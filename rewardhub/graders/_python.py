"""The ``python`` grader: the spec's ``grade(sample, item)`` run in rewardhub-code's OS sandbox (no network,
an unprivileged uid, pids/memory cgroups where the host has them) with OpenAI's documented limits: 2 minutes,
2 GB of memory, 1 GB of disk; the source under 256 kB was checked when the spec was."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from typing import Any

from ..errors import UsageError
from ._flags import GraderError

__all__ = ["LIMITS", "PACKAGES_ENV", "run_in_sandbox", "run_python_grader"]

#: a folder of the packages a python grader may import (``pip install --target``; see
#: ``python_grader_packages.txt``, OpenAI's documented set); unset: the standard library only
PACKAGES_ENV = "REWARDHUB_PYTHON_GRADER_PACKAGES"

#: OpenAI's documented limits of a python grader
LIMITS = {"timeout_s": 120.0, "memory_mb": 2048, "disk_mb": 1024, "cpus": 2}

_HARNESS = r"""
import importlib.util, json, os, sys
data = json.loads(sys.stdin.read())
if data.get("packages"):
    sys.path.insert(0, data["packages"])
spec = importlib.util.spec_from_file_location("grader", os.path.join(os.path.dirname(__file__), "grader.py"))
grader = importlib.util.module_from_spec(spec)
spec.loader.exec_module(grader)
value = getattr(grader, data["fn"])(*data["args"])
try:
    value = float(value)
except (TypeError, ValueError):
    print(json.dumps({"bad": repr(value)[:200]}))
    raise SystemExit(0)
print("\n" + json.dumps({"score": value}))
"""


def _materialize(node: Any) -> Any:
    if callable(node):
        try:
            return node()
        except GraderError:
            return None  # output_json of an output that is not JSON: None, as OpenAI's runner gives it
    if isinstance(node, Mapping):
        return {k: _materialize(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_materialize(v) for v in node]
    return node


def run_python_grader(
    spec: Mapping[str, Any], scope: Mapping[str, Any], limits: Mapping[str, Any] | None = None
) -> float:
    """``grade(sample, item)``'s value, as a float; a :class:`GraderError` with the spec's flag when the code
    fails (``python_grader_runtime_error``: it raised, ran past a limit, returned no number) or the sandbox
    does (``python_grader_server_error``)."""
    args = _materialize([scope["sample"], scope["item"]])
    return run_in_sandbox(spec["source"], "grade", args, limits)


def run_in_sandbox(source: str, fn: str, args: list[Any], limits: Mapping[str, Any] | None = None) -> float:
    """``fn(*args)`` of ``source`` in the sandbox: its value as a float (as :func:`run_python_grader`)."""
    import importlib

    try:  # the plugin's sandbox, looked up at run time (the core never imports a plugin by name)
        sandbox = importlib.import_module("rewardhub_code.sandbox")
        SandboxLimits, run_python = sandbox.SandboxLimits, sandbox.run_python
    except ImportError:
        raise UsageError(
            "a python grader runs in rewardhub-code's sandbox, which is not installed\n"
            "pip install rewardhub-code (plugins/rewardhub-code)"
        ) from None
    lim = {**LIMITS, **(limits or {})}
    config = SandboxLimits(
        timeout_s=float(lim["timeout_s"]),
        memory_mb=int(lim["memory_mb"]),
        tmpfs_mb=int(lim["disk_mb"]),
        file_size_mb=int(lim["disk_mb"]),
        pids_max=64,
    )
    packages = os.path.expanduser(os.environ.get(PACKAGES_ENV, ""))
    if packages and not os.path.isdir(packages):
        raise UsageError(
            f"{PACKAGES_ENV}={packages!r} is not a folder\n"
            "build it: pip install --target DIR -r rewardhub/graders/python_grader_packages.txt"
        )
    if packages:
        config = dataclasses.replace(config, visible_paths=(os.path.realpath(packages),))
    doc = {"fn": fn, "args": args, "packages": os.path.realpath(packages) if packages else None}
    payload = json.dumps(doc, default=str)
    res = run_python(
        {"grader.py": source, "main.py": _HARNESS}, "main.py", stdin=payload, config=config
    )
    if res.status == "sandbox_error":
        raise GraderError("python_grader_server_error", f"the sandbox failed: {res.stderr[-300:]}")
    if res.status == "timeout":
        raise GraderError(
            "python_grader_runtime_error", f"{fn}() ran past the {lim['timeout_s']:g} s limit and was killed"
        )
    if res.status == "memory":
        raise GraderError(
            "python_grader_runtime_error",
            f"{fn}() went over the {lim['memory_mb']} MB memory limit and was killed",
        )
    if res.status != "ok":
        tail = (res.stderr or res.stdout).strip()[-400:]
        raise GraderError("python_grader_runtime_error", f"{fn}() failed ({res.status}): {tail}")
    last = res.stdout.strip().splitlines()[-1:] or [""]
    try:
        out = json.loads(last[0])
    except json.JSONDecodeError:
        out = {}
    if "score" not in out:
        raise GraderError(
            "python_grader_runtime_error", f"{fn}() returned {out.get('bad', 'nothing')}, not a number"
        )
    return float(out["score"])
