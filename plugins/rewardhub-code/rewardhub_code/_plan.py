"""What the local sandbox can enforce on this machine (probed once), and the report of it.

This module deliberately does not import ``rewardhub``.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from typing import Any

from . import _cgroup
from ._config import SandboxLimits
from ._seccomp import keyring_filter
from ._view import PATH
from ._view import PRIVATE_TMPFS
from ._view import SANDBOX_CWD
from ._view import runtime_paths

__all__ = ["LAUNCH", "isolation_plan", "isolation_report"]

LAUNCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_launch.py")


@functools.cache
def _cgroups_available() -> tuple[str, ...]:
    if os.geteuid() != 0:
        return ()
    return tuple(c for c in ("pids", "memory") if _cgroup.controller_usable(c))


@functools.cache
def _bwrap_works(drop: bool) -> str | None:
    """Path of a working bubblewrap (probed once), or ``None``."""
    bwrap = shutil.which("bwrap", path=PATH)
    if not bwrap:
        return None
    # no user namespace: as root the uid drop below needs the host's uids mapped
    argv = [bwrap, "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--ro-bind", "/", "/",
            "--proc", "/proc", "--dev", "/dev"]
    if drop and os.geteuid() == 0:
        setpriv = shutil.which("setpriv", path=PATH)
        if not setpriv:
            return None
        argv += ["--", setpriv, "--reuid", "65534", "--regid", "65534", "--clear-groups", "/bin/true"]
    else:
        argv += ["--", "/bin/true"]
    try:
        ok = subprocess.run(argv, env={"PATH": PATH}, capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    return bwrap if ok else None


def _launcher_runs(runtime: bool) -> bool:
    import tempfile

    work = tempfile.mkdtemp(prefix="rhc-probe-")
    spec = {"mode": "native", "namespaces": True, "workdir": work, "cwd": "/tmp/rhc-probe", "files": [],
            "tmpfs": ["/tmp"], "tmpfs_bytes": 1 << 20, "uid": None, "gid": None, "parent": os.getpid(),
            "argv": ["/bin/true"], "env": {"PATH": PATH}}
    if runtime:
        spec["runtime"] = runtime_paths(SandboxLimits())
    try:
        proc = subprocess.run([sys.executable, "-I", "-S", LAUNCH, json.dumps(spec)], env={"PATH": PATH},
                              capture_output=True, timeout=20)
        return proc.returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False
    finally:
        shutil.rmtree(work, ignore_errors=True)


@functools.cache
def _native_support() -> str | None:
    """What the launcher's own namespaces give here (probed once): ``"runtime_only"`` (a root of
    the runtime only, as under bubblewrap), ``"namespaces"`` (the host's tree, hidden paths
    aside), or ``None``."""
    if _launcher_runs(runtime=True):
        return "runtime_only"
    return "namespaces" if _launcher_runs(runtime=False) else None


def isolation_plan(config: SandboxLimits) -> dict[str, Any]:
    """How a run with ``config`` is isolated on this machine: the ``mode`` (``bwrap``, ``native`` or
    ``plain``), whether privileges are dropped, the cgroup hierarchies used, and whether the program sees
    only the runtime (``runtime_only``)."""
    root = os.geteuid() == 0
    drop = root and config.drop_privileges
    cgroups = _cgroups_available() if config.use_cgroups is not False else ()
    want_bwrap = config.use_bwrap is not False and config.use_namespaces is not False
    bwrap = _bwrap_works(drop) if want_bwrap else None
    if bwrap:
        mode = "bwrap"
    elif config.use_namespaces is not False and _native_support():
        mode = "native"
    else:
        mode = "plain"
    runtime_only = mode == "bwrap" or (mode == "native" and _native_support() == "runtime_only")
    return {"root": root, "drop": drop, "cgroups": cgroups, "bwrap": bwrap, "mode": mode,
            "runtime_only": runtime_only}


def isolation_report(config: SandboxLimits | None = None) -> dict[str, Any]:
    """What the local sandbox enforces on this machine, and what it cannot.

    :returns: ``{"mode": "bwrap"|"native"|"plain", "enforced": {mechanism: bool}, "visible": {...},
        "notes": [...]}``; ``visible`` says what of the filesystem the program sees: ``runtime_only``
        (true under bubblewrap: nothing but what is listed), ``read_only`` (paths, and symlinks as
        ``path -> target``), ``private`` (empty tmpfs mounts of its own), ``dev`` and ``proc``.
    """
    config = config or SandboxLimits()
    p = isolation_plan(config)
    ns = p["mode"] in ("bwrap", "native")
    enforced = {
        "process_group": True,
        "wall_time": True,
        "cpu_time_rlimit": True,
        "address_space_rlimit": True,
        "file_size_rlimit": True,
        "open_files_rlimit": True,
        "output_cap": True,
        "clean_environment": True,
        "private_workdir": True,
        "unprivileged_uid": p["drop"],
        "process_count_rlimit": p["drop"] or not p["root"],
        "pids_cgroup": "pids" in p["cgroups"],
        "memory_cgroup": "memory" in p["cgroups"],
        "network_namespace": ns,
        "private_tmp": ns,
        "read_only_root_fs": p["runtime_only"],
        "runtime_only_filesystem": p["runtime_only"],
        "pid_namespace": p["mode"] == "bwrap",
        "ipc_uts_namespaces": ns,
        "kernel_keyrings_blocked": keyring_filter() is not None,
    }
    notes = []
    if not p["root"]:
        notes.append("not running as root: the program runs as the scoring user (it can signal the "
                     "scorer's other processes unless in a PID namespace), no per-run uid, no cgroups; "
                     "RLIMIT_NPROC counts all of that user's threads, so it is set to the user's count "
                     "at launch plus pids_max: shared by concurrent runs and the scorer's own threads")
    elif not p["drop"]:
        notes.append("drop_privileges=False: the program runs as root")
    if not p["cgroups"]:
        notes.append("no writable cgroup-v1 pids/memory hierarchy: no per-run process or total-memory "
                     "limit beyond rlimits")
    if p["mode"] == "native" and p["runtime_only"]:
        notes.append("bubblewrap not used: native namespaces (network, mount, IPC, UTS) without a PID "
                     "namespace (the program sees the host's process list, though as its own uid it can "
                     "signal only itself); the launcher builds the runtime-only root itself")
    elif p["mode"] == "native":
        notes.append("bubblewrap not used: native namespaces (network, mount, IPC, UTS) without a PID "
                     "namespace; the root filesystem is not mounted read-only, so only file permissions "
                     "keep the unprivileged uid from writing (world-writable directories get a "
                     "private tmpfs)")
    if p["mode"] == "plain":
        notes.append("no namespaces: the program CAN use the network (loopback included), see the host's "
                     "/tmp and write wherever its uid may write")
    if p["runtime_only"]:
        runtime = runtime_paths(config)
        bwrap = p["mode"] == "bwrap"
        visible: dict[str, Any] = {
            "runtime_only": True,
            "read_only": [
                path if how == "bind" else f"{path} -> {how[len('symlink:') :]}" for path, how in runtime
            ],
            "private": [
                *PRIVATE_TMPFS,
                f"{SANDBOX_CWD} (the working directory: the program's files, read-only)",
            ],
            "dev": "bubblewrap's minimal /dev: null, zero, full, random, urandom, tty, console, pts, shm"
            if bwrap
            else "/dev/shm and the host's null, zero, full, random, urandom, tty",
            "proc": "/proc of the run's own PID namespace"
            if bwrap
            else "the host's /proc (no PID namespace: other processes are listed)",
        }
        notes.append("the program sees only the Python runtime (see 'visible'): nothing under /run, /home, "
                     "/root, /var, /opt, /srv or any data folder, so no host socket or file readable by "
                     "others is reachable")
    else:
        hidden = [d for d in config.hide_paths if os.path.isdir(d)]
        visible = {
            "runtime_only": False,
            "read_only": ["/ (the whole host filesystem, as file permissions allow)"],
            "private": [d for d in ("/tmp", "/var/tmp", "/dev/shm", "/run/lock") if os.path.isdir(d)]
            if p["mode"] == "native" else [],
            "hidden": hidden if p["mode"] == "native" else [],
            "dev": "the host's /dev",
            "proc": "the host's /proc",
        }
        notes.append("without bubblewrap the program sees the host's filesystem: files readable by 'other' "
                     "(datasets, answer keys) stay readable and world-writable unix sockets outside /tmp "
                     "(e.g. under /run) stay reachable; install bubblewrap to show it the runtime only")
    return {"mode": p["mode"], "enforced": enforced, "visible": visible, "notes": notes}


