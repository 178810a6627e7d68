"""Fixtures for every test tree of the repo (tests/ and plugins/*/tests)."""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

import pytest

#: whether this process's Ray is the shared one that ``session_ray`` started (kept up between modules)
_shared = {"up": False}


def _start_local(ray: Any) -> None:
    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False,
             configure_logging=False)


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray for one test module (the shared one, when it is up)."""
    ray = pytest.importorskip("ray")
    started = not ray.is_initialized()
    if started:
        _start_local(ray)
    try:
        yield ray
    finally:
        if started:
            ray.shutdown()


@pytest.fixture(scope="module")
def session_ray():
    """The shared local Ray (``ray.init`` takes seconds): started by the first module that asks for it
    and kept up for the next ones, until the session ends or a module that starts a cluster of its own
    (``own_ray``) stops it."""
    ray = pytest.importorskip("ray")
    if not ray.is_initialized():
        _start_local(ray)
        _shared["up"] = True
    return ray


@pytest.fixture(scope="module")
def own_ray():
    """For a module that starts a Ray cluster of its own: the shared local Ray, when it is up in this
    process, is stopped first (the next module that asks for it starts it again); any other Ray still
    up here is a test's leak."""
    ray = pytest.importorskip("ray")
    if _shared["up"] and ray.is_initialized():
        ray.shutdown()
    _shared["up"] = False
    assert not ray.is_initialized(), "another test left Ray running"
    yield ray


def pytest_configure(config: pytest.Config) -> None:
    """Ray's auto-connect off in every test process: a Ray call with no Ray up here (Ray Serve's router
    and long-poll threads make such calls after ``ray.shutdown()``) would otherwise ``ray.init()`` with
    no address, which joins the cluster this machine started last: another worker's, or anyone's, and
    this process dies with it. The tests and the package start Ray explicitly. (The variable reaches the
    processes the tests start; Ray reads it when first imported.)"""
    os.environ["RAY_ENABLE_AUTO_CONNECT"] = "0"
    hook = sys.modules.get("ray._private.auto_init_hook")
    if hook is not None:
        hook.enable_auto_connect = False
    # a suite started in the background (``make test &``, nohup, some CI runners) inherits SIGINT ignored,
    # and passes it on to every command a test starts: the tests that press Ctrl-C on one would see it
    # ignored. The processes the tests start get SIGINT as from a terminal.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _shared["up"]:
        import ray

        if ray.is_initialized():
            ray.shutdown()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``make test`` runs modules on two workers (pytest-xdist): a module stays whole on one worker (its
    module fixtures, a Ray cluster among them, start once), and the longest go first so that no long one
    is left for the end: the trainer's and the cluster tests (each starts Ray), then by number of tests."""
    from xdist.scheduler import LoadScopeScheduling

    heavy = ("tests/trainer/", "tests/distributed/")

    class LongestFirst(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return nodeid.split("::", 1)[0]

        def _assign_work_unit(self, node: Any) -> None:
            first = max(self.workqueue,
                        key=lambda s: (s.startswith(heavy), len(self.workqueue[s])))
            self.workqueue.move_to_end(first, last=False)
            super()._assign_work_unit(node)

    return LongestFirst(config, log)
