"""Fixtures: after every test, no sandbox process, cgroup or temporary directory may remain."""

from __future__ import annotations

import time

import pytest
from leftovers import sandbox_processes
from leftovers import slot_cgroups
from leftovers import work_dirs
from rewardhub_code import reward as reward_mod
from rewardhub_code import sandbox


@pytest.fixture(autouse=True)
def no_leftovers():
    """Fail the test if anything a sandboxed program started or created outlives its run."""
    before = work_dirs()
    yield
    # a run is over when run_python returns; give the kernel a moment to reap what it killed
    deadline = time.monotonic() + 20.0  # moments; longer on a loaded host
    while (sandbox_processes() or slot_cgroups()) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert sandbox_processes() == [], "a sandboxed process outlived its run"
    assert slot_cgroups() == [], "a run's cgroup was not removed"
    assert work_dirs() - before == set(), "a run's working directory was not removed"


@pytest.fixture
def fresh_warnings(monkeypatch):
    """Forget which degraded-isolation warnings this process has already shown."""
    monkeypatch.setattr(reward_mod, "_warned", set())


@pytest.fixture(scope="session")
def isolation():
    """What this machine's local sandbox enforces (see ``isolation_report``)."""
    return sandbox.isolation_report()


@pytest.fixture(scope="session")
def fork_guard(isolation):
    """Skip unless a fork bomb is bounded: a pids cgroup, or an unprivileged uid with RLIMIT_NPROC."""
    e = isolation["enforced"]
    if not (e["pids_cgroup"] or (e["unprivileged_uid"] and e["process_count_rlimit"])):
        pytest.skip("no process-count guard on this machine (no pids cgroup, no unprivileged uid): "
                    "a fork bomb is not run without one")
