"""Shared fixtures: a fresh registry cache per test, and a runner of the real CLI in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _fresh_registry_cache():
    from rewardhub.registry import get_registry

    get_registry.cache_clear()
    yield
    get_registry.cache_clear()


def run_cli(*args: str, env: dict[str, str] | None = None, cwd: str | os.PathLike[str] | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``python -m rewardhub ARGS`` in a fresh process, as a user's shell would."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "rewardhub", *args], capture_output=True, text=True,
                          env=full_env, cwd=cwd, timeout=timeout)


@pytest.fixture
def cli():
    return run_cli
