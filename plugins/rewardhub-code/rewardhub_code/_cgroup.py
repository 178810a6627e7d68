"""cgroup-v1 ``pids`` and ``memory`` groups for one sandboxed run, and killing what is in them."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable

__all__ = ["CGROUP_ROOT", "RunCgroup", "controller_usable", "pids_of_uid", "kill_pids", "tasks_of_uid"]

CGROUP_ROOT = "/sys/fs/cgroup"
_PARENT = "rewardhub-code"


def controller_usable(controller: str) -> bool:
    """True when a child group can be created (and removed) under ``controller``'s v1 hierarchy."""
    base = os.path.join(CGROUP_ROOT, controller)
    if not os.path.isfile(os.path.join(base, "cgroup.procs")):
        return False
    probe = os.path.join(base, _PARENT, f"probe-{os.getpid()}-{time.monotonic_ns()}")
    try:
        os.makedirs(probe)
        os.rmdir(probe)
        return True
    except OSError:
        return False


def _write(path: str, value: str) -> None:
    with open(path, "w") as fh:
        fh.write(value)


def kill_pids(pids: Iterable[int]) -> int:
    """SIGKILL every pid; returns how many signals were delivered."""
    n = 0
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            n += 1
        except (ProcessLookupError, PermissionError):
            pass
    return n


def pids_of_uid(uid: int | Iterable[int]) -> list[int]:
    """Pids of processes whose real, effective or saved uid is ``uid`` (or one of them; scans ``/proc``)."""
    wanted = {str(uid).encode()} if isinstance(uid, int) else {str(u).encode() for u in uid}
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as fh:
                for line in fh:
                    if line.startswith(b"Uid:"):
                        if wanted.intersection(line.split()[1:4]):
                            out.append(int(name))
                        break
        except OSError:
            continue
    return out


def tasks_of_uid(uid: int) -> int:
    """How many threads run under real uid ``uid`` (what ``RLIMIT_NPROC`` counts)."""
    n = 0
    for pid in pids_of_uid(uid):
        try:
            n += len(os.listdir(f"/proc/{pid}/task"))
        except OSError:
            continue
    return n


class RunCgroup:
    """A ``pids`` (and optionally ``memory``) group named after the run's slot.

    :param name: leaf name, unique among concurrent runs (the slot's uid).
    :param controllers: v1 controllers to create it in.
    """

    def __init__(self, name: str, controllers: tuple[str, ...]) -> None:
        self.paths = {c: os.path.join(CGROUP_ROOT, c, _PARENT, name) for c in controllers}

    @property
    def procs_files(self) -> list[str]:
        """The ``cgroup.procs`` files the launcher writes its pid into."""
        return [os.path.join(p, "cgroup.procs") for p in self.paths.values()]

    def create(self, *, pids_max: int, memory_bytes: int | None) -> None:
        """(Re)create the groups, clearing out anything a crashed earlier run left, and set limits."""
        self.destroy()
        for controller, path in self.paths.items():
            os.makedirs(path, exist_ok=True)
            if controller == "pids":
                _write(os.path.join(path, "pids.max"), str(int(pids_max)))
            elif controller == "memory" and memory_bytes:
                _write(os.path.join(path, "memory.limit_in_bytes"), str(int(memory_bytes)))
                memsw = os.path.join(path, "memory.memsw.limit_in_bytes")
                if os.path.exists(memsw):
                    _write(memsw, str(int(memory_bytes)))

    def members(self) -> set[int]:
        """Pids currently in any of the groups."""
        out: set[int] = set()
        for path in self.paths.values():
            try:
                with open(os.path.join(path, "cgroup.procs")) as fh:
                    out.update(int(x) for x in fh.read().split())
            except (OSError, ValueError):
                pass
        return out

    def memory_events(self) -> int:
        """How often the memory limit was hit (``memory.failcnt``), 0 without a memory group."""
        path = self.paths.get("memory")
        if not path:
            return 0
        try:
            with open(os.path.join(path, "memory.failcnt")) as fh:
                return int(fh.read().strip() or 0)
        except (OSError, ValueError):
            return 0

    def kill_all(self, deadline_s: float = 5.0) -> bool:
        """SIGKILL members until the groups are empty; True when they emptied in time.

        A fork bomb cannot outrun this: the ``pids`` limit bounds how many processes can exist.
        """
        end = time.monotonic() + deadline_s
        while True:
            pids = self.members()
            if not pids:
                return True
            kill_pids(pids)
            if time.monotonic() > end:
                return False
            time.sleep(0.002)

    def destroy(self) -> bool:
        """Kill everything in the groups and remove them; True when all were removed."""
        ok = True
        if any(os.path.isdir(p) for p in self.paths.values()):
            ok = self.kill_all()
        for path in self.paths.values():
            for _ in range(200):
                try:
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    # zombies not yet reaped by their parent keep the group busy for a moment
                    kill_pids(self.members())
                    time.sleep(0.005)
            else:
                ok = False
        return ok
