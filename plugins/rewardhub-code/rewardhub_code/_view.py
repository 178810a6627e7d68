"""What a sandboxed program sees of the filesystem: the Python runtime and nothing else.

Under bubblewrap the program's root is empty but for:

- read-only: the system runtime (``/usr``, and ``/bin``, ``/lib``... as on the host, symlinks
  kept), the dynamic loader's cache and the time zone from ``/etc``, the interpreter's own
  installation (with its standard library and site-packages), and any ``SandboxLimits.visible_paths``;
- private and empty: ``/tmp`` (the working directory is ``/tmp/sandbox``) and ``/dev/shm``;
- bubblewrap's minimal ``/dev`` (null, zero, full, random, urandom, tty, pts) and a ``/proc`` of
  the run's own PID namespace.

Nothing under ``/run`` (the D-Bus and other sockets), ``/home``, ``/root``, ``/srv``, ``/opt``,
``/var``, ``/work`` or any other data folder is there, so a file readable by others or a
world-writable socket on the host cannot be reached.

This module deliberately does not import ``rewardhub``.
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._config import SandboxLimits

__all__ = ["SANDBOX_CWD", "PRIVATE_TMPFS", "RUNTIME_FILES", "bwrap_argv", "clean_env", "interpreter",
           "reachable_by_others", "runtime_paths", "under"]

#: the working directory programs see
SANDBOX_CWD = "/tmp/sandbox"
PATH = "/usr/local/bin:/usr/bin:/bin"
#: world-writable places that get a private tmpfs inside the sandbox (native mode: all that exist)
TMPFS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
#: the private tmpfs mounts under bubblewrap
PRIVATE_TMPFS = ("/tmp", "/dev/shm")
#: top-level system folders the interpreter and its shared libraries may need (bound read-only,
#: or recreated as the same symlink on a merged-/usr system)
RUNTIME_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
#: files from /etc that the dynamic loader and the time functions read
RUNTIME_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime")


def clean_env() -> dict[str, str]:
    return {"PATH": PATH, "HOME": SANDBOX_CWD, "TMPDIR": SANDBOX_CWD, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
            "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def interpreter(config: SandboxLimits) -> tuple[str, str]:
    """(interpreter path, installation prefix to make visible inside the sandbox)."""
    if config.python:
        path = os.path.realpath(config.python)
        return path, os.path.dirname(os.path.dirname(path))
    base = getattr(sys, "_base_executable", None) or sys.executable
    return os.path.realpath(base), os.path.realpath(sys.base_prefix)


def _venv_home(prefix: str) -> str | None:
    """The base installation of a virtual environment at ``prefix`` (its ``pyvenv.cfg`` ``home``)."""
    try:
        with open(os.path.join(prefix, "pyvenv.cfg"), encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition("=")
                if key.strip() == "home" and value.strip():
                    return os.path.dirname(os.path.realpath(value.strip()))
    except OSError:
        pass
    return None


def under(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def runtime_paths(config: SandboxLimits) -> list[tuple[str, str]]:
    """What the program sees read-only: ``(path, "bind")`` or ``(path, "symlink:" + target)``, in
    mount order (a folder before what is under it)."""
    out: list[tuple[str, str]] = []
    for d in RUNTIME_DIRS:
        if os.path.islink(d):
            out.append((d, "symlink:" + os.readlink(d)))
        elif os.path.isdir(d):
            out.append((d, "bind"))
    out += [(f, "bind") for f in RUNTIME_FILES if os.path.exists(f)]
    _, prefix = interpreter(config)
    extra = [prefix]
    home = _venv_home(prefix)
    if home:
        extra.append(home)
    extra += [os.path.realpath(p) for p in config.visible_paths]
    seen = [p for p, how in out if how == "bind"]
    for p in extra:
        if os.path.exists(p) and not any(under(p, s) for s in seen):
            out.append((p, "bind"))
            seen.append(p)
    return out


def reachable_by_others(path: str) -> bool:
    """Whether a uid with no special rights can execute ``path`` (every parent searchable)."""
    d = os.path.dirname(path)
    while True:
        if not os.stat(d).st_mode & 0o001:
            return False
        if d == "/":
            break
        d = os.path.dirname(d)
    return bool(os.stat(path).st_mode & 0o001)


def bwrap_argv(bwrap: str, config: SandboxLimits, workdir: str, files: list[str], uid: int | None,
               inner: list[str], *, seccomp_fd: int | None = None) -> list[str]:
    """bubblewrap's command line: an empty root with the runtime read-only, private /tmp and
    /dev/shm, a minimal /dev, the program's files read-only in :data:`SANDBOX_CWD`, and the
    seccomp filter read from ``seccomp_fd`` (see :mod:`._seccomp`)."""
    argv = [bwrap, "--die-with-parent", "--new-session", "--unshare-net", "--unshare-pid", "--unshare-ipc",
            "--unshare-uts", "--unshare-cgroup-try", "--hostname", "sandbox"]
    if seccomp_fd is not None:
        argv += ["--seccomp", str(seccomp_fd)]
    made: set[str] = set()
    for path, how in runtime_paths(config):
        # bubblewrap would make missing parents (/etc, /root/.pyenv...) mode 0700: unusable by the
        # program's uid; made here first, searchable (and empty but for what is bound into them)
        parents = []
        d = os.path.dirname(path)
        while d not in ("/", "") and d not in made:
            parents.append(d)
            d = os.path.dirname(d)
        for d in reversed(parents):
            argv += ["--perms", "0755", "--dir", d]
            made.add(d)
        if how.startswith("symlink:"):
            argv += ["--symlink", how[len("symlink:"):], path]
        else:
            argv += ["--ro-bind", path, path]
    argv += ["--dev", "/dev", "--proc", "/proc"]
    size = str(config.tmpfs_mb << 20)
    for d in PRIVATE_TMPFS:
        argv += ["--perms", "1777", "--size", size, "--tmpfs", d]
    argv += ["--perms", "0777", "--dir", SANDBOX_CWD]
    for name in files:
        argv += ["--ro-bind", os.path.join(workdir, name), f"{SANDBOX_CWD}/{name}"]
    argv += ["--remount-ro", "/", "--chdir", SANDBOX_CWD, "--"]
    if uid is not None:
        setpriv = shutil.which("setpriv", path=PATH) or "setpriv"
        argv += [setpriv, "--reuid", str(uid), "--regid", str(uid), "--clear-groups", "--no-new-privs",
                 "--inh-caps=-all", "--bounding-set=-all"]
    return argv + inner
