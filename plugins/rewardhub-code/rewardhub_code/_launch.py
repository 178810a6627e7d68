"""First stage of a sandboxed run: a tiny launcher executed as ``python -I -S _launch.py SPEC``.

It runs in the child, after ``fork`` and ``exec`` (so the scoring process never needs a
thread-unsafe ``preexec_fn``), and before any untrusted code:

1. joins the run's cgroups (so that every later fork is counted from the start),
2. sets the resource limits (inherited by everything it executes),
3. then either ``exec``\\ s bubblewrap (``mode == "bwrap"``), or, in ``native`` mode, unshares
   network/mount/IPC/UTS namespaces itself, puts private tmpfs mounts over the world-writable
   directories, copies the program files into a private working directory, drops to the
   unprivileged uid, installs the seccomp filter that blocks the kernel keyrings, and ``exec``\\ s
   the interpreter.

Only the standard library is used, and nothing from ``rewardhub``. Failures print a line
starting with ``rhc-launch:`` to stderr and exit with status 125.
"""

from __future__ import annotations

import json
import os
import resource
import sys
from typing import Any
from typing import cast

_CLONE_NEWNS = 0x00020000
_CLONE_NEWUTS = 0x04000000
_CLONE_NEWIPC = 0x08000000
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
_MS_RDONLY = 1
_MS_NOSUID = 2
_MS_REMOUNT = 32
_MS_BIND = 4096
_MS_NODEV = 4
_MS_REC = 16384
_MS_PRIVATE = 1 << 18
_PR_SET_PDEATHSIG = 1
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_SIGKILL = 9

_LIMITS = {
    "cpu": resource.RLIMIT_CPU,
    "as": resource.RLIMIT_AS,
    "fsize": resource.RLIMIT_FSIZE,
    "nproc": resource.RLIMIT_NPROC,
    "nofile": resource.RLIMIT_NOFILE,
    "core": resource.RLIMIT_CORE,
    "stack": resource.RLIMIT_STACK,
}


def _die(msg: str) -> None:
    os.write(2, f"rhc-launch: {msg}\n".encode())
    os._exit(125)


def _libc() -> tuple[Any, Any]:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    return libc, ctypes


def _check(ret: int, what: str, ctypes: Any) -> None:
    if ret != 0:
        _die(f"{what} failed: {os.strerror(ctypes.get_errno())}")


#: pivot_root(2) has no libc wrapper: its system call number, per machine
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "ppc64le": 203, "s390x": 217, "riscv64": 41}
_MNT_DETACH = 2
_DEVICES = ("null", "zero", "full", "random", "urandom", "tty")


def _runtime_root(spec: dict[str, Any], libc: Any, ctypes: Any) -> None:
    """Make the root a fresh tmpfs holding only ``spec["runtime"]`` (bound read-only, or symlinks),
    private tmpfs on /tmp and /dev/shm, the few device nodes Python uses, and /proc; then
    ``pivot_root`` into it and drop the host's tree. What bubblewrap does, for hosts without it."""
    import platform

    os.umask(0o022)
    new = os.path.join(spec["workdir"], ".root")
    os.mkdir(new, 0o755)
    size = int(spec["tmpfs_bytes"])
    _check(
        libc.mount(b"tmpfs", new.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, b"mode=0755"),
        "mount root tmpfs",
        ctypes,
    )

    def bind(src: str, rel: str, read_only: bool) -> None:
        target = new + rel
        if os.path.isdir(src):
            os.makedirs(target, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            open(target, "a").close()
        _check(
            libc.mount(src.encode(), target.encode(), None, _MS_BIND | _MS_REC, None), f"bind {src}", ctypes
        )
        if read_only:
            _check(
                libc.mount(
                    None, target.encode(), None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID, None
                ),
                f"remount {src} read-only",
                ctypes,
            )

    for path, how in spec["runtime"]:
        if how.startswith("symlink:"):
            os.makedirs(os.path.dirname(new + path), exist_ok=True)
            os.symlink(how[len("symlink:"):], new + path)
        else:
            bind(path, path, True)
    for d in ("/tmp", "/dev/shm"):
        os.makedirs(new + d, exist_ok=True)
        opts = f"size={size},mode=1777".encode()
        _check(
            libc.mount(b"tmpfs", (new + d).encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, opts),
            f"mount tmpfs on {d}",
            ctypes,
        )
    for dev in _DEVICES:
        if os.path.exists(f"/dev/{dev}"):
            bind(f"/dev/{dev}", f"/dev/{dev}", False)
    bind("/proc", "/proc", False)
    number = _SYS_PIVOT_ROOT.get(platform.machine())
    if number is None:
        _die(f"pivot_root: unknown system call number on {platform.machine()}")
    os.chdir(new)
    os.mkdir(".old")
    _check(libc.syscall(number, b".", b".old"), "pivot_root", ctypes)
    os.chdir("/")
    _check(libc.umount2(b"/.old", _MNT_DETACH), "umount the host's root", ctypes)
    os.rmdir("/.old")
    _check(libc.mount(None, b"/", None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID, None),
           "remount / read-only", ctypes)


def _seccomp(program: bytes, libc: Any, ctypes: Any) -> None:
    """Install a classic-BPF seccomp filter (``struct sock_filter`` array; see ``_seccomp.py``)."""

    class _Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    buf = ctypes.create_string_buffer(program, len(program))
    prog = _Fprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
    _check(
        libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0), "seccomp filter", ctypes
    )


def _native(spec: dict[str, Any]) -> None:
    """Namespaces, private tmpfs, privilege drop, exec (used when bubblewrap is not available)."""
    libc, ctypes = _libc()
    src = os.open(spec["workdir"], os.O_RDONLY | os.O_DIRECTORY)
    root = os.geteuid() == 0
    flags = _CLONE_NEWNET | _CLONE_NEWNS | _CLONE_NEWIPC | _CLONE_NEWUTS
    if not root:
        flags |= _CLONE_NEWUSER
    if spec.get("namespaces", True):
        _check(libc.unshare(flags), "unshare", ctypes)
        if not root:
            for name, text in (("setgroups", "deny"), ("uid_map", f"{os.getuid()} {os.getuid()} 1"),
                               ("gid_map", f"{os.getgid()} {os.getgid()} 1")):
                with open(f"/proc/self/{name}", "w") as fh:
                    fh.write(text)
        _check(libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None), "mount --make-rprivate /", ctypes)
        if spec.get("runtime"):  # a root of its own: the runtime read-only, private /tmp and /dev/shm
            _runtime_root(spec, libc, ctypes)
        # opened in the new mount namespace, before the tmpfs mounts cover them
        bind_fds = [(d, os.open(d, os.O_PATH | os.O_DIRECTORY)) for d in spec.get("binds", ())]
        size = int(spec["tmpfs_bytes"])
        for d in spec["tmpfs"] if not spec.get("runtime") else ():
            if os.path.isdir(d):
                opts = f"size={size},mode=1777".encode()
                _check(libc.mount(b"tmpfs", d.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, opts),
                       f"mount tmpfs on {d}", ctypes)
        for d in spec.get("hide", ()) if not spec.get("runtime") else ():
            _check(libc.mount(b"tmpfs", d.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, b"size=1m,mode=0755"),
                   f"mount tmpfs on {d}", ctypes)
        for d, fd in bind_fds:  # e.g. the Python installation under a hidden /root
            os.makedirs(d, mode=0o755, exist_ok=True)
            _check(libc.mount(f"/proc/self/fd/{fd}".encode(), d.encode(), None, _MS_BIND | _MS_REC, None),
                   f"bind {d}", ctypes)
            os.close(fd)
            _check(libc.mount(None, d.encode(), None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY, None),
                   f"remount {d} read-only", ctypes)
    work = spec["cwd"]
    os.makedirs(work, mode=0o777, exist_ok=True)
    os.chmod(work, 0o777)
    for name in spec["files"]:
        fd = os.open(name, os.O_RDONLY, dir_fd=src)
        with os.fdopen(fd, "rb") as fin, open(os.path.join(work, name), "wb") as fout:
            fout.write(fin.read())
    os.close(src)
    os.chdir(work)
    uid, gid = spec.get("uid"), spec.get("gid")
    if uid is not None and root:
        os.setgroups([])
        os.setresgid(cast(int, gid), cast(int, gid), cast(int, gid))
        os.setresuid(uid, uid, uid)
    # after the credential change, which clears it: die with the scoring thread
    libc.prctl(_PR_SET_PDEATHSIG, _SIGKILL, 0, 0, 0)
    if os.getppid() != spec["parent"]:
        _die("parent exited")
    libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    if spec.get("seccomp"):
        _seccomp(bytes.fromhex(spec["seccomp"]), libc, ctypes)
    argv = spec["argv"]
    os.execve(argv[0], argv, spec["env"])


def main() -> None:
    """Read the JSON spec in ``argv[1]`` and run it."""
    spec = json.loads(sys.argv[1])
    pid = str(os.getpid()).encode()
    for procs in spec.get("cgroups", ()):
        try:
            fd = os.open(procs, os.O_WRONLY)
            try:
                os.write(fd, pid)
            finally:
                os.close(fd)
        except OSError as exc:
            _die(f"cannot join cgroup {procs}: {exc}")
    for key, value in spec.get("rlimits", {}).items():
        try:
            # CPU: SIGXCPU at the soft limit, SIGKILL a second later for a program that catches it
            hard = int(value) + 1 if key == "cpu" else int(value)
            resource.setrlimit(_LIMITS[key], (int(value), hard))
        except (OSError, ValueError) as exc:
            _die(f"setrlimit {key}={value}: {exc}")
    if spec["mode"] == "bwrap":
        argv = spec["argv"]
        os.execve(argv[0], argv, spec["env"])
    _native(spec)


if __name__ == "__main__":
    try:
        main()
    except SystemExit:
        raise
    except BaseException as exc:  # noqa: BLE001 - report anything as a launcher failure
        _die(f"{type(exc).__name__}: {exc}")
