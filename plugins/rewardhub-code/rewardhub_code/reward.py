"""The ``code_tests`` and ``code_io`` rewards: run the response's program against the sample's tests.

Where the program runs is chosen by the ``sandbox`` keyword argument, which the runner fills
from the config's ``reward.sandbox`` section (legacy ``sandbox_fusion.*``) for every reward with
the ``sandbox`` capability: with a ``url``, a SandboxFusion server; without one, the local
sandbox (:mod:`rewardhub_code.sandbox`).
"""

from __future__ import annotations

import dataclasses
import threading
import time
import warnings
from collections.abc import Mapping
from typing import Any

from rewardhub.config.fields import invalid
from rewardhub.config.fields import unknown_key
from rewardhub.decorator import reward
from rewardhub.errors import RewardhubWarning
from rewardhub.errors import UsageError

from . import sandbox as _sandbox
from ._programs import AssertTests
from ._programs import IOTests
from ._programs import build_harness
from ._programs import extract_code
from ._programs import outputs_match
from ._programs import parse_tests
from ._programs import read_harness_output
from ._remote import RemoteSandbox
from .sandbox import RunResult

__all__ = ["code_tests", "code_io", "SandboxUnavailableError", "DEFAULT_TIMEOUT_S"]

#: per program run, when neither the term nor ``reward.sandbox.timeout_s`` sets one
DEFAULT_TIMEOUT_S = 5.0
_SANDBOX_KEYS = ("url", "max_concurrent", "memory_limit_mb", "timeout_s", "language", "retries")
_LOCAL_KEYS = tuple(f.name for f in dataclasses.fields(_sandbox.SandboxLimits))
#: what a run's status means for the reward's ``error`` metric
_STATUS_ERRORS = {"timeout": "timeout", "memory": "memory", "output_limit": "output_limit"}
#: isolation the docs promise; a missing one is announced once per process
_KEY_ISOLATION = ("network_namespace", "unprivileged_uid", "pids_cgroup", "memory_cgroup",
                  "read_only_root_fs", "runtime_only_filesystem", "private_tmp", "pid_namespace")
_warned: set[tuple[str, ...]] = set()
_warn_lock = threading.Lock()


class SandboxUnavailableError(RuntimeError):
    """The sandbox itself failed (not the program): the sample gets the term's ``on_failure`` value."""


class _Local:
    def __init__(self, config: _sandbox.SandboxLimits) -> None:
        self.config = config
        _warn_degraded(config)

    def run(self, code: str, *, stdin: str, timeout_s: float) -> RunResult:
        cfg = self.config if timeout_s == self.config.timeout_s else dataclasses.replace(self.config,
                                                                                         timeout_s=timeout_s)
        return _sandbox.run_python({"main.py": code}, "main.py", stdin=stdin, config=cfg)


def _warn_degraded(config: _sandbox.SandboxLimits) -> None:
    report = _sandbox.isolation_report(config)
    missing = tuple(k for k in _KEY_ISOLATION if not report["enforced"].get(k))
    if not missing:
        return
    with _warn_lock:
        if missing in _warned:
            return
        _warned.add(missing)
    warnings.warn(RewardhubWarning(
        f"rewardhub-code local sandbox ({report['mode']} mode) cannot enforce: {', '.join(missing)}\n"
        + "\n".join(report["notes"])
        + "\nsee plugins/rewardhub-code/README.md (Isolation), "
          "or set reward.sandbox.url to a SandboxFusion server"),
        stacklevel=3)


def _backend(sandbox: Mapping[str, Any] | None, memory_mb: int | None, local: Mapping[str, Any] | None,
             language: str) -> tuple[Any, float | None]:
    """(backend with ``.run(code, stdin=, timeout_s=)``, ``reward.sandbox.timeout_s``)."""
    sb = dict(sandbox or {})
    bad = sorted(set(map(str, sb)) - set(_SANDBOX_KEYS))
    if bad:
        raise unknown_key(f"reward.sandbox.{bad[0]}", _SANDBOX_KEYS)
    mem = int(memory_mb or sb.get("memory_limit_mb") or 1024)
    lang = str(sb.get("language") or language)
    if sb.get("url"):
        try:
            return RemoteSandbox(str(sb["url"]), max_concurrent=int(sb.get("max_concurrent") or 8),
                                 memory_limit_mb=mem, retries=int(sb.get("retries", 2)),
                                 language=lang), sb.get("timeout_s")
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    if lang != "python":
        raise invalid(
            "reward.sandbox.language",
            lang,
            "set reward.sandbox.url to a SandboxFusion server for other languages",
            "the local sandbox runs Python only",
        )
    opts = dict(local or {})
    bad = sorted(set(map(str, opts)) - set(_LOCAL_KEYS))
    if bad:  # the code reward's keyword argument ``local`` (a term's kwargs.local)
        raise unknown_key(f"kwargs.local.{bad[0]}", _LOCAL_KEYS)
    opts.setdefault("memory_mb", mem)
    if "uids" in opts and not isinstance(opts["uids"], range):
        lo, hi = opts["uids"]
        opts["uids"] = range(int(lo), int(hi))
    for key in ("hide_paths", "visible_paths", "python_flags"):
        if isinstance(opts.get(key), (list, tuple)):
            opts[key] = tuple(str(p) for p in opts[key])
    return _Local(_sandbox.SandboxLimits(**opts)), sb.get("timeout_s")


def _result(passed: int, total: int, *, all_or_nothing: bool, timed_out: bool, error: str,
            mode: str) -> dict[str, Any]:
    if error == "output_limit":
        passed = 0  # a flood of output is a failure whatever it printed first
    frac = passed / total if total else 0.0
    score = (1.0 if passed == total and total else 0.0) if all_or_nothing else frac
    return {"score": float(score), "passed": passed, "failed": total - passed, "total": total,
            "timed_out": int(timed_out), "error": error, "backend": mode}


def _check_run(res: RunResult) -> None:
    if res.status == "sandbox_error":
        raise SandboxUnavailableError(f"code sandbox failed (not the program): {res.stderr.strip()[:500]}")


def _common(response: str, ground_truth: Any, sandbox: Mapping[str, Any] | None, timeout_s: float | None,
            memory_mb: int | None, allow_unfenced: bool, local: Mapping[str, Any] | None,
            language: str) -> tuple[Any, str | None, Any, float]:
    tests = parse_tests(ground_truth)
    backend, sb_timeout = _backend(sandbox, memory_mb, local, language)
    per_run = float(timeout_s or sb_timeout or DEFAULT_TIMEOUT_S)
    lang = getattr(backend, "language", "python")
    code = extract_code(response, language=lang, allow_unfenced=allow_unfenced)
    return tests, code, backend, per_run


def _mode(backend: Any) -> str:
    return "remote" if isinstance(backend, RemoteSandbox) else "local"


def _run_asserts(backend: Any, code: str, tests: AssertTests, per_run: float,
                 all_or_nothing: bool) -> dict[str, Any]:
    n = len(tests.tests)
    res = backend.run(build_harness(code, tests), stdin="", timeout_s=per_run)
    _check_run(res)
    got = read_harness_output(res.stdout, n)
    if got["harness_error"]:
        raise SandboxUnavailableError(f"code sandbox failed (not the program): {got['harness_error']}")
    passed = sum(1 for r in got["results"] if r is True)
    if res.status in _STATUS_ERRORS:
        error = _STATUS_ERRORS[res.status]
    elif got["phase_error"]:
        error = got["phase_error"]
    elif got["first_error"]:
        error = got["first_error"]
    elif not got["done"] or res.status != "ok":
        error = "runtime_error"  # died between tests (os._exit, a signal) or failed after them
        passed = 0 if res.status != "ok" and got["done"] else passed
    else:
        error = ""
    return _result(passed, n, all_or_nothing=all_or_nothing, timed_out=res.status == "timeout", error=error,
                   mode=_mode(backend))


def _run_io(backend: Any, code: str, tests: IOTests, per_run: float, all_or_nothing: bool,
            max_total_s: float) -> dict[str, Any]:
    n = len(tests.inputs)
    passed = 0
    error = ""
    timed_out = False
    end = time.monotonic() + max_total_s
    for stdin, expected in zip(tests.inputs, tests.outputs):
        if time.monotonic() > end:
            error = error or "timeout"
            timed_out = True
            break
        res = backend.run(code, stdin=stdin, timeout_s=per_run)
        _check_run(res)
        if res.status == "ok" and outputs_match(res.stdout, expected):
            passed += 1
            continue
        timed_out = timed_out or res.status == "timeout"
        kind = _STATUS_ERRORS.get(res.status) or (
            "wrong_answer" if res.status == "ok"
            else "syntax_error" if "SyntaxError" in res.stderr[-2000:] else "runtime_error")
        error = error or kind
        if kind == "output_limit":
            error = kind
        if all_or_nothing or kind in ("output_limit", "syntax_error"):
            break  # the rest cannot change the score
    return _result(passed, n, all_or_nothing=all_or_nothing, timed_out=timed_out, error=error,
                   mode=_mode(backend))


def _no_code(tests: AssertTests | IOTests, backend: Any) -> dict[str, Any]:
    n = len(tests.tests) if isinstance(tests, AssertTests) else len(tests.inputs)
    return _result(0, n, all_or_nothing=False, timed_out=False, error="no_code", mode=_mode(backend))


@reward(name="code_tests", executor="process", timeout_s=60.0, capabilities=("sandbox",), cache=True)
def code_tests(*, response: str, ground_truth: Any, prompt: Any = None, data_source: Any = None,
               extra_info: Any = None, sandbox: Mapping[str, Any] | None = None, all_or_nothing: bool = False,
               timeout_s: float | None = None, memory_mb: int | None = None, allow_unfenced: bool = False,
               max_total_s: float = 45.0, local: Mapping[str, Any] | None = None, language: str = "python",
               **kwargs: Any) -> dict[str, Any]:
    """Fraction of the sample's tests (assert-style or stdin/stdout) the response's program passes.

    ``ground_truth`` holds the tests: a list of assert statements (or ``{"tests": [...],
    "setup": ...}``, or HumanEval's ``{"test", "entry_point"}``) run in one sandboxed program,
    or ``{"inputs": [...], "outputs": [...]}`` pairs run one program each. The program is the
    last fenced code block of the response. Returns ``{"score", "passed", "failed", "total",
    "timed_out", "error", "backend"}``; ``error`` is ``""``, ``no_code``, ``syntax_error``,
    ``wrong_answer``, ``runtime_error``, ``timeout``, ``memory``, ``output_limit`` or ``tampered``
    (the program wrote on the harness's report channel: it scores 0).

    :param sandbox: the ``reward.sandbox`` section (``url`` set: a SandboxFusion server).
    :param all_or_nothing: 1.0 only when every test passes, else 0.0.
    :param timeout_s: wall-clock limit per program run (default ``reward.sandbox.timeout_s``, else 5).
    :param memory_mb: memory limit per run (default ``reward.sandbox.memory_limit_mb``, else 1024).
    :param allow_unfenced: take the whole response as the program when it has no fenced block.
    :param max_total_s: stdin/stdout tests: stop starting new runs after this long.
    :param local: overrides of :class:`rewardhub_code.sandbox.SandboxLimits` for the local sandbox.

    Example:

        >>> code_tests(response="```python\\ndef add(a, b):\\n    return a + b\\n```",
        ...            ground_truth=["assert add(1, 2) == 3", "assert add(0, 0) == 1"])["score"]
        0.5
    """
    tests, code, backend, per_run = _common(response, ground_truth, sandbox, timeout_s, memory_mb,
                                            allow_unfenced, local, language)
    if code is None:
        return _no_code(tests, backend)
    if isinstance(tests, IOTests):
        return _run_io(backend, code, tests, per_run, all_or_nothing, max_total_s)
    if getattr(backend, "language", "python") != "python":
        raise UsageError(f"code_tests: assert-style tests need Python, reward.sandbox.language is "
                         f"{backend.language!r}\n"
                         "use stdin/stdout tests ({'inputs': [...], 'outputs': [...]})")
    return _run_asserts(backend, code, tests, per_run, all_or_nothing)


@reward(name="code_io", executor="process", timeout_s=60.0, capabilities=("sandbox",), cache=True)
def code_io(*, response: str, ground_truth: Any, prompt: Any = None, data_source: Any = None,
            extra_info: Any = None, sandbox: Mapping[str, Any] | None = None, all_or_nothing: bool = False,
            timeout_s: float | None = None, memory_mb: int | None = None, allow_unfenced: bool = False,
            max_total_s: float = 45.0, local: Mapping[str, Any] | None = None, language: str = "python",
            **kwargs: Any) -> dict[str, Any]:
    """Fraction of stdin/stdout test cases whose expected output the response's program prints.

    Like ``code_tests`` but ``ground_truth`` must be stdin/stdout pairs (``{"inputs": [...],
    "outputs": [...]}`` or a list of ``{"input", "output"}``); each case is one program run, and
    outputs are compared up to trailing whitespace. Works for any language a SandboxFusion
    server runs (``reward.sandbox.language``); the local sandbox runs Python.

    Example:

        >>> code_io(response="```python\\nprint(int(input()) * 2)\\n```",
        ...         ground_truth={"inputs": ["2\\n", "5\\n"], "outputs": ["4\\n", "10\\n"]})["score"]
        1.0
    """
    tests, code, backend, per_run = _common(response, ground_truth, sandbox, timeout_s, memory_mb,
                                            allow_unfenced, local, language)
    if not isinstance(tests, IOTests):
        raise UsageError("code_io: ground_truth holds assert-style tests, not stdin/stdout pairs\n"
                         "give {'inputs': [...], 'outputs': [...]} or use the code_tests reward")
    if code is None:
        return _no_code(tests, backend)
    return _run_io(backend, code, tests, per_run, all_or_nothing, max_total_s)
