"""Fixtures for every test tree of the repo (tests/ and plugins/*/tests)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest


@contextlib.contextmanager
def _ray_up() -> Iterator[Any]:
    """The Ray already up, else a local one started here and shut down on leaving."""
    ray = pytest.importorskip("ray")
    started = not ray.is_initialized()
    if started:
        ray.init(
            address="local", num_cpus=4, include_dashboard=False, log_to_driver=False, configure_logging=False
        )
    try:
        yield ray
    finally:
        if started:
            ray.shutdown()


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray for one test module (the session's, when one is up)."""
    with _ray_up() as ray:
        yield ray


@pytest.fixture(scope="session")
def session_ray():
    """A local Ray kept for the rest of the session (``ray.init`` takes seconds)."""
    with _ray_up() as ray:
        yield ray
