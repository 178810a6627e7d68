"""Fixtures for every test tree of the repo (tests/ and plugins/*/tests)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def local_ray():
    """The tests' one local Ray: the one already up, else started here once and shut down at the end."""
    ray = pytest.importorskip("ray")
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    if started:
        ray.shutdown()
