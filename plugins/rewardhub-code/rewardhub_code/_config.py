"""The local sandbox's limits for one run, and what one run did.

This module deliberately does not import ``rewardhub``.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field
from typing import Any

__all__ = ["RunResult", "SandboxLimits"]


@dataclass(frozen=True)
class SandboxLimits:
    """Limits for one run.

    :param timeout_s: wall-clock limit; the whole run is killed when it passes.
    :param cpu_s: CPU-time limit per process (``RLIMIT_CPU``); default ``ceil(timeout_s) + 1``.
    :param memory_mb: address-space limit per process and memory-cgroup limit for the run.
    :param pids_max: most processes/threads at once (cgroup ``pids.max``, and ``RLIMIT_NPROC``).
    :param file_size_mb: largest file the program may write (``RLIMIT_FSIZE``).
    :param tmpfs_mb: size of the private working directory (and of each private tmpfs).
    :param max_output_bytes: cap per stream; a program writing more is killed.
    :param python: interpreter for the program (default: the base interpreter of the scoring one,
        i.e. the same Python without the virtual environment's packages).
    :param uids: pool of unprivileged uids, one per concurrent run (root only).
    :param use_bwrap: ``None`` auto-detects bubblewrap; ``False`` uses the native launcher.
    :param use_cgroups: ``None`` auto-detects writable cgroup-v1 ``pids``/``memory`` hierarchies.
    :param python_flags: interpreter options before the program (``-I``: isolated mode).
    :param use_namespaces: ``False`` runs without any namespace (``plain`` mode: only for testing
        the degraded path, or where namespaces are unavailable anyway).
    :param drop_privileges: run as a uid from ``uids`` when root (never turn off in production).
    :param hide_paths: directories replaced by an empty tmpfs inside the sandbox (native mode; under
        bubblewrap nothing outside the runtime is there to hide).
    :param visible_paths: more paths the program may read (read-only), e.g. a folder of packages it
        may import; nothing else outside the Python runtime is visible under bubblewrap.
    """

    timeout_s: float = 5.0
    cpu_s: float | None = None
    memory_mb: int = 1024
    pids_max: int = 64
    file_size_mb: int = 16
    tmpfs_mb: int = 64
    max_output_bytes: int = 1 << 20
    python: str = ""
    uids: range = range(0x7A000000, 0x7A000000 + 64)
    use_bwrap: bool | None = None
    use_cgroups: bool | None = None
    use_namespaces: bool | None = None
    python_flags: tuple[str, ...] = ("-I",)
    drop_privileges: bool = True
    hide_paths: tuple[str, ...] = ("/root", "/home", "/mnt", "/srv", "/media")
    visible_paths: tuple[str, ...] = ()


@dataclass
class RunResult:
    """What one run did.

    ``status`` is one of ``ok`` (exit status 0), ``error`` (non-zero exit or killed by a signal),
    ``timeout`` (wall or CPU limit), ``memory`` (memory limit), ``output_limit`` (too much
    output) or ``sandbox_error`` (the sandbox itself failed; ``stderr`` says why).
    """

    status: str
    returncode: int | None = None
    stdout: str = ""
    stderr: str = ""
    wall_s: float = 0.0
    signal: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
