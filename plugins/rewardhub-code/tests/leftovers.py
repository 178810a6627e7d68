"""What a sandboxed run could leave behind: processes of a sandbox uid, run cgroups, working directories."""

from __future__ import annotations

import glob
import os
import tempfile

from rewardhub_code import _cgroup
from rewardhub_code import sandbox

SLOT_UIDS = sandbox.SandboxLimits().uids


def sandbox_processes() -> list[int]:
    """Pids running under any sandbox uid."""
    return _cgroup.pids_of_uid(SLOT_UIDS)


def slot_cgroups() -> list[str]:
    return sorted(glob.glob(os.path.join(_cgroup.CGROUP_ROOT, "*", "rewardhub-code", "slot-*")))


def work_dirs() -> set[str]:
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "rhc-*")))
