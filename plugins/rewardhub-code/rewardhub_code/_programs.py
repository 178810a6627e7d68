"""What to run: the program in a response, the tests in a ground truth, and the assert-test harness.

Nothing here runs code; :mod:`rewardhub_code.reward` hands the programs built here to a backend
(the local sandbox or a remote SandboxFusion server).
"""

from __future__ import annotations

import json
import re
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

# The harness is the program that runs. Its first process (the supervisor) never runs the
# model's code: it makes itself non-dumpable (so that a process of the same uid cannot open its
# /proc/<pid>/fd, read its memory or ptrace it), then forks a child that loads the model's code
# as a module named "solution", runs the setup, then each test. The child has /dev/null as its
# stdin, its stdout joined to stderr, and reports to the supervisor on a pipe of its own, each record prefixed
# by a nonce drawn in the sandbox (it is never on stdin, in a file or in the environment). The
# supervisor passes on, on its own stdout (which the child does not hold), only records that
# come in the harness's order (compile or load error, or test 0, 1, ... then done) with the
# nonce; anything else ends the run as "tampered". What is left: the child runs the program in
# its own interpreter, so a program that reads that interpreter's memory (the harness's frames)
# can learn the nonce and imitate the harness; it cannot reach the scorer's channel.
_HARNESS = r"""
import json as _json
import os as _os
import sys as _sys

_LINE_MAX = 4096


def _rh_libc():
    import ctypes

    return ctypes.CDLL(None, use_errno=True), ctypes


def _rh_child(payload, wfd, nonce, exit_):
    def emit(rec):
        _os.write(wfd, (nonce + " " + _json.dumps(rec) + "\n").encode())

    def kind(exc):
        return type(exc).__name__[:100]

    g = {"__name__": "solution", "__builtins__": __builtins__}
    try:
        code = compile(payload["solution"], "solution.py", "exec")
    except BaseException as exc:  # SyntaxError, ValueError (NUL bytes), RecursionError ...
        emit({"phase": "compile", "error": kind(exc)})
        exit_(0)
    try:
        exec(code, g)
        if payload["setup"]:
            exec(compile(payload["setup"], "tests_setup.py", "exec"), g)
    except BaseException as exc:
        emit({"phase": "load", "error": kind(exc)})
        exit_(0)
    for i, test in enumerate(payload["tests"]):
        try:
            exec(compile(test, "test_%d.py" % i, "exec"), g)
        except BaseException as exc:
            emit({"i": i, "ok": False, "error": kind(exc)})
        else:
            emit({"i": i, "ok": True})
    emit({"phase": "done"})
    exit_(0)


def _rh_clean(rec, expect, n):
    # the record to pass on, or None when it is not the one the harness would send next
    if type(rec) is not dict:
        return None
    err = rec.get("error")
    err = err[:100] if type(err) is str else "?"
    phase = rec.get("phase")
    if phase in ("compile", "load") and expect == 0 and len(rec) == 2:
        return {"phase": phase, "error": err}
    if phase == "done" and expect == n and len(rec) == 1:
        return {"phase": "done"}
    i, ok = rec.get("i"), rec.get("ok")
    if phase is None and type(i) is int and i == expect < n and type(ok) is bool:
        return {"i": i, "ok": True} if ok and len(rec) == 2 else {"i": i, "ok": False, "error": err}
    return None


def _rh_relay(rfd, report, nonce, n):
    prefix = (nonce + " ").encode()
    buf = b""
    expect = 0
    while True:
        chunk = _os.read(rfd, 65536)
        if not chunk:
            return "eof"
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            rec = None
            if line.startswith(prefix):
                try:
                    rec = _rh_clean(_json.loads(line[len(prefix):]), expect, n)
                except ValueError:
                    rec = None
            if rec is None:
                return "tampered"
            report(rec)
            if "phase" in rec:
                return "end"
            expect += 1
        if len(buf) > _LINE_MAX:
            return "tampered"


def _rh_main(payload):
    def report(rec):
        _os.write(1, ("RHC " + _json.dumps(rec) + "\n").encode())

    try:
        libc, ctypes = _rh_libc()
        if libc.prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE 0
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE)")
    except Exception as exc:
        report({"phase": "harness", "error": "cannot hide the harness: %r" % (exc,)})
        return 0
    nonce = _os.urandom(16).hex()
    rfd, wfd = _os.pipe()
    pid = _os.fork()
    if pid == 0:  # the child: the program's process
        exit_ = _os._exit
        try:
            null = _os.open(_os.devnull, _os.O_RDONLY)
            _os.dup2(null, 0)
            _os.close(null)
            _os.dup2(2, 1)  # what the program prints goes to stderr (capped there like any output)
            _os.close(rfd)
            _os.closerange(3, wfd)
            _os.closerange(wfd + 1, 65536)
            libc.prctl(4, 1, 0, 0, 0)  # dumpable again: the program's own business
            _rh_child(payload, wfd, nonce, exit_)
        finally:
            exit_(0)
    _os.close(wfd)
    end = _rh_relay(rfd, report, nonce, len(payload["tests"]))
    if end == "tampered":
        report({"phase": "tampered"})
    if end != "eof":
        try:
            _os.kill(pid, 9)
        except OSError:
            pass
    status = _os.waitpid(pid, 0)[1]
    if end == "eof" and _os.WIFSIGNALED(status):  # die as the program did (memory, CPU time ...)
        import signal

        sig = _os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        _os.kill(_os.getpid(), sig)
    return _os.WEXITSTATUS(status) if end == "eof" and _os.WIFEXITED(status) else 0


_sys.exit(_rh_main(_json.loads(PAYLOAD)))
"""

_PREFIX = "RHC "


def build_harness(solution: str, tests: AssertTests) -> str:
    """The program that runs ``tests`` against ``solution`` (it reads nothing on standard input)."""
    payload = json.dumps({"solution": solution, "setup": tests.setup, "tests": list(tests.tests)})
    return _HARNESS.replace("PAYLOAD", repr(payload), 1)


def read_harness_output(stdout: str, n_tests: int) -> dict[str, Any]:
    """Results from the harness's report lines (its supervisor's standard output).

    :returns: ``{"results": [bool|None per test], "phase_error": str|None, "done": bool,
        "first_error": str|None, "harness_error": str|None}``; ``None`` marks a test that never
        reported (the run died); a tampered run reports no result at all.
    """
    results: list[bool | None] = [None] * n_tests
    phase_error = first_error = harness_error = None
    done = False
    for line in stdout.splitlines():
        if not line.startswith(_PREFIX):
            continue
        try:
            rec = json.loads(line[len(_PREFIX):])
        except json.JSONDecodeError:
            continue
        if not isinstance(rec, dict):
            continue
        if rec.get("phase") == "done":
            done = True
        elif rec.get("phase") == "tampered":
            return {"results": [None] * n_tests, "phase_error": "tampered", "done": False,
                    "first_error": None, "harness_error": None}
        elif rec.get("phase") == "harness":
            harness_error = str(rec.get("error"))
        elif rec.get("phase") in ("compile", "load"):
            phase_error = "syntax_error" if rec["phase"] == "compile" and rec.get("error") == "SyntaxError" \
                else _error_kind(str(rec.get("error")))
        elif isinstance(rec.get("i"), int) and 0 <= rec["i"] < n_tests:
            results[rec["i"]] = bool(rec.get("ok"))
            if not rec.get("ok") and first_error is None:
                first_error = _error_kind(str(rec.get("error")))
    return {"results": results, "phase_error": phase_error, "done": done, "first_error": first_error,
            "harness_error": harness_error}


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
