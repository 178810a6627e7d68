"""What to run: the program in a response, the tests in a ground truth, and the assert-test harness.

Nothing here runs code; :mod:`rewardhub_code.reward` hands the programs built here to a backend
(the local sandbox or a remote SandboxFusion server).
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rewardhub.errors import UsageError

__all__ = ["AssertTests", "IOTests", "extract_code", "parse_tests", "build_harness", "read_harness_output",
           "outputs_match"]

# ``` or ~~~ fences, an optional info string, the body up to the matching closing fence
_FENCE = re.compile(r"^[ \t]*(?P<f>`{3,}|~{3,})[ \t]*(?P<lang>[\w+.#-]*)[^\n]*\n"
                    r"(?P<body>.*?)^[ \t]*(?P=f)[ \t]*$", re.DOTALL | re.MULTILINE)
_PY_LANGS = {"python", "py", "python3", "py3", ""}


def extract_code(response: object, *, language: str = "python", allow_unfenced: bool = False) -> str | None:
    """The program in a response: the last fenced block in ``language`` (or without a language tag).

    :param allow_unfenced: when there is no fenced block, take the whole response as the program.
    :returns: the code, or ``None`` when the response holds none.

    Example:

        >>> extract_code("Here:\\n```python\\nprint(1)\\n```\\n")
        'print(1)\\n'
    """
    if not isinstance(response, str):
        return None
    wanted = _PY_LANGS if language == "python" else {language.lower(), ""}
    blocks = [m for m in _FENCE.finditer(response) if m.group("lang").lower() in wanted]
    if blocks:
        tagged = [m for m in blocks if m.group("lang")]
        return (tagged or blocks)[-1].group("body")
    if allow_unfenced and response.strip():
        return response
    return None


@dataclass(frozen=True)
class AssertTests:
    """Assert-style tests: ``setup`` runs once after the program, then each of ``tests`` on its own."""

    tests: tuple[str, ...]
    setup: str = ""


@dataclass(frozen=True)
class IOTests:
    """Standard-input / expected standard-output pairs, one program run each."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


_FORMATS = ("a list of assert statements, {'tests': [...], 'setup': ...}, HumanEval's "
            "{'test': 'def check(candidate): ...', 'entry_point': 'f'}, {'inputs': [...], 'outputs': [...]}, "
            "or a list of {'input': ..., 'output': ...}; a JSON string of any of these works too")


def _bad(why: str) -> UsageError:
    return UsageError(f"code reward: ground_truth {why}\nexpected {_FORMATS}")


def _text(x: Any, what: str) -> str:
    if isinstance(x, str):
        return x
    if isinstance(x, (list, tuple)) and all(isinstance(line, str) for line in x):
        return "\n".join(x) + ("\n" if x else "")
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return str(x)
    raise _bad(f"{what} is a {type(x).__name__}, not a string")


def parse_tests(ground_truth: Any) -> AssertTests | IOTests:
    """Turn a sample's ``ground_truth`` into tests (see :data:`_FORMATS` for the accepted shapes).

    :raises rewardhub.errors.UsageError: naming the problem and the accepted formats.
    """
    gt = ground_truth
    if isinstance(gt, (bytes, bytearray)):
        gt = gt.decode("utf-8", "replace")
    if isinstance(gt, str):
        stripped = gt.strip()
        if stripped[:1] in ("{", "["):
            try:
                gt = json.loads(stripped)
            except json.JSONDecodeError:
                gt = stripped  # plain test code that happens to start with a bracket
        if isinstance(gt, str):
            if not gt.strip():
                raise _bad("is empty")
            return AssertTests(tests=(gt,))
    if isinstance(gt, Mapping):
        if "inputs" in gt or "outputs" in gt or "input_output" in gt:
            if "input_output" in gt:  # APPS / TACO rows
                inner = gt["input_output"]
                return parse_tests(inner if not isinstance(inner, str) else json.loads(inner))
            ins, outs = gt.get("inputs"), gt.get("outputs")
            if not isinstance(ins, Sequence) or not isinstance(outs, Sequence) or isinstance(ins, str) \
                    or isinstance(outs, str):
                raise _bad("'inputs' and 'outputs' must both be lists")
            if len(ins) != len(outs):
                raise _bad(f"has {len(ins)} inputs but {len(outs)} outputs")
            if not ins:
                raise _bad("has no test cases")
            return IOTests(tuple(_text(x, f"inputs[{i}]") for i, x in enumerate(ins)),
                           tuple(_text(x, f"outputs[{i}]") for i, x in enumerate(outs)))
        if "entry_point" in gt and "test" in gt:  # HumanEval
            return AssertTests(tests=(f"check({gt['entry_point']})",), setup=_text(gt["test"], "'test'"))
        if "tests" in gt:
            tests = gt["tests"]
            tests = [tests] if isinstance(tests, str) else tests
            if not isinstance(tests, Sequence) or not tests:
                raise _bad("'tests' must be a non-empty list of strings")
            return AssertTests(tuple(_text(t, f"tests[{i}]") for i, t in enumerate(tests)),
                               _text(gt.get("setup", ""), "'setup'"))
        raise _bad(f"has keys {sorted(map(str, gt))}, "
                   "none of 'tests', 'test'+'entry_point', 'inputs'+'outputs'")
    if isinstance(gt, Sequence) and not isinstance(gt, str):
        if not gt:
            raise _bad("is an empty list")
        if all(isinstance(x, Mapping) for x in gt):
            try:
                return IOTests(tuple(_text(x["input"], f"[{i}]['input']") for i, x in enumerate(gt)),
                               tuple(_text(x["output"], f"[{i}]['output']") for i, x in enumerate(gt)))
            except KeyError as exc:
                raise _bad(f"list item has no {exc.args[0]!r} key") from None
        return AssertTests(tuple(_text(t, f"[{i}]") for i, t in enumerate(gt)))
    raise _bad(f"is a {type(gt).__name__}")


# ----------------------------------------------------------------------------- assert harness

# The harness is the program that runs: it loads the model's code as a module named
# "solution", runs the setup, then each test, and reports one line per test on stdout, each
# prefixed by a nonce it reads from stdin (so that ordinary prints cannot pass for results).
# A hostile program running in the same interpreter could still dig the nonce out of the
# harness's frames; the sandbox protects the machine, the nonce only keeps honest output
# from being misread.
_HARNESS = r'''
import json as _json
import sys as _sys


def _rh_main(payload):
    nonce = _sys.stdin.readline().strip()
    out = _sys.stdout

    def emit(rec):
        out.write("\n" + nonce + " " + _json.dumps(rec) + "\n")
        out.flush()

    def kind(exc):
        return type(exc).__name__

    g = {"__name__": "solution", "__builtins__": __builtins__}
    try:
        code = compile(payload["solution"], "solution.py", "exec")
    except BaseException as exc:  # SyntaxError, ValueError (NUL bytes), RecursionError ...
        emit({"phase": "compile", "error": kind(exc)})
        return
    try:
        exec(code, g)
        if payload["setup"]:
            exec(compile(payload["setup"], "tests_setup.py", "exec"), g)
    except BaseException as exc:
        emit({"phase": "load", "error": kind(exc)})
        return
    for i, test in enumerate(payload["tests"]):
        try:
            exec(compile(test, "test_%d.py" % i, "exec"), g)
        except BaseException as exc:
            emit({"i": i, "ok": False, "error": kind(exc)})
        else:
            emit({"i": i, "ok": True})
    emit({"phase": "done"})


_rh_main(_json.loads(PAYLOAD))
'''


def build_harness(solution: str, tests: AssertTests) -> tuple[str, str]:
    """(program source, nonce); feed ``nonce + "\\n"`` on the program's standard input."""
    payload = json.dumps({"solution": solution, "setup": tests.setup, "tests": list(tests.tests)})
    nonce = "RHC-" + secrets.token_hex(16)
    return _HARNESS.replace("PAYLOAD", repr(payload), 1), nonce


def read_harness_output(stdout: str, nonce: str, n_tests: int) -> dict[str, Any]:
    """Results from the harness's report lines.

    :returns: ``{"results": [bool|None per test], "phase_error": str|None, "done": bool,
        "first_error": str|None}``; ``None`` marks a test that never reported (the run died).
    """
    results: list[bool | None] = [None] * n_tests
    phase_error = first_error = None
    done = False
    prefix = nonce + " "
    for line in stdout.splitlines():
        if not line.startswith(prefix):
            continue
        try:
            rec = json.loads(line[len(prefix):])
        except json.JSONDecodeError:
            continue
        if rec.get("phase") == "done":
            done = True
        elif rec.get("phase") in ("compile", "load"):
            phase_error = "syntax_error" if rec["phase"] == "compile" and rec.get("error") == "SyntaxError" \
                else _error_kind(str(rec.get("error")))
        elif isinstance(rec.get("i"), int) and 0 <= rec["i"] < n_tests:
            results[rec["i"]] = bool(rec.get("ok"))
            if not rec.get("ok") and first_error is None:
                first_error = _error_kind(str(rec.get("error")))
    return {"results": results, "phase_error": phase_error, "done": done, "first_error": first_error}


def _error_kind(exc_name: str) -> str:
    if exc_name == "AssertionError":
        return "wrong_answer"
    if exc_name == "MemoryError":
        return "memory"
    if exc_name in ("SyntaxError", "IndentationError", "TabError"):
        return "syntax_error"
    return "runtime_error"


# ----------------------------------------------------------------------------- stdin/stdout


def _norm(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def outputs_match(actual: str, expected: str) -> bool:
    """Equal up to trailing whitespace on each line and trailing blank lines (the usual judge rule)."""
    return _norm(actual) == _norm(expected)
