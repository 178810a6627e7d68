"""Meta-tests: every module imports cleanly with warnings as errors; the core stays light."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import pytest

import rewardhub

HEAVY = ("torch", "ray", "transformers", "vllm", "numpy", "omegaconf", "sympy", "math_verify", "reasoning_gym")
MODULES = sorted(m.name for m in pkgutil.walk_packages(rewardhub.__path__, "rewardhub.")
                 if not m.name.startswith("rewardhub.distributed"))


@pytest.mark.parametrize("module", MODULES)
def test_module_imports_with_warnings_as_errors(module):
    subprocess.run([sys.executable, "-W", "error", "-c", f"import {module}"], check=True)


def _heavy_after(code: str) -> list[str]:
    probe = f"{code}\nimport sys\nprint(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    last = out.splitlines()[-1] if out.splitlines() else ""
    return [m for m in last.split(",") if m]


def test_import_rewardhub_is_light():
    assert _heavy_after("import rewardhub") == []


def test_rewardhub_list_is_light():
    code = "import io, contextlib\nfrom rewardhub.cli import main\n" \
           "with contextlib.redirect_stdout(io.StringIO()):\n    main(['list', '--json'])"
    assert _heavy_after(code) == []


def test_public_names_exported():
    for name in rewardhub.__all__:
        assert getattr(rewardhub, name) is not None
