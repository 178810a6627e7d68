"""Local sandbox: run an untrusted Python program with OS-level limits, no server needed.

Every run gets a fresh session (process group), a private working directory on a size-limited
tmpfs, resource limits (CPU time, address space, file size, open files, processes), a clean
environment, a wall-clock deadline after which everything it started is killed, and capped
stdout/stderr. As root it also gets its own unprivileged uid (one per concurrent run) and a
cgroup-v1 ``pids`` and ``memory`` group. With bubblewrap it runs in new network/PID/IPC/UTS/mount
namespaces on a read-only root filesystem; without it, the launcher's own network/IPC/UTS/mount
namespaces (no PID namespace, root filesystem left writable to file permissions). What is
actually enforced on this machine is reported by :func:`isolation_report`; nothing is claimed
that is not.

This module deliberately does not import ``rewardhub``.
"""

from __future__ import annotations

import functools
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from dataclasses import field
from typing import Any

from . import _cgroup
from ._slots import acquire_slot
from ._slots import try_slot

__all__ = ["SandboxConfig", "RunResult", "run_python", "isolation_report", "reap_stale", "SANDBOX_CWD"]

#: the working directory programs see
SANDBOX_CWD = "/tmp/sandbox"
_LAUNCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_launch.py")
_PATH = "/usr/local/bin:/usr/bin:/bin"
#: world-writable places that get a private tmpfs inside the sandbox
_TMPFS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")


@dataclass(frozen=True)
class SandboxConfig:
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
    :param hide_paths: directories replaced by an empty tmpfs inside the sandbox.
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


# --------------------------------------------------------------------------- capabilities


@functools.lru_cache(maxsize=None)
def _cgroups_available() -> tuple[str, ...]:
    if os.geteuid() != 0:
        return ()
    return tuple(c for c in ("pids", "memory") if _cgroup.controller_usable(c))


@functools.lru_cache(maxsize=None)
def _bwrap_works(drop: bool) -> str | None:
    """Path of a working bubblewrap (probed once), or ``None``."""
    bwrap = shutil.which("bwrap", path=_PATH)
    if not bwrap:
        return None
    # no user namespace: as root the uid drop below needs the host's uids mapped
    argv = [bwrap, "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--ro-bind", "/", "/",
            "--proc", "/proc", "--dev", "/dev"]
    if drop and os.geteuid() == 0:
        setpriv = shutil.which("setpriv", path=_PATH)
        if not setpriv:
            return None
        argv += ["--", setpriv, "--reuid", "65534", "--regid", "65534", "--clear-groups", "/bin/true"]
    else:
        argv += ["--", "/bin/true"]
    try:
        ok = subprocess.run(argv, env={"PATH": _PATH}, capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    return bwrap if ok else None


@functools.lru_cache(maxsize=None)
def _native_namespaces_work() -> bool:
    spec = {"mode": "native", "namespaces": True, "workdir": "/", "cwd": "/tmp/rhc-probe", "files": [],
            "tmpfs": ["/tmp"], "tmpfs_bytes": 1 << 20, "uid": None, "gid": None, "parent": os.getpid(),
            "argv": ["/bin/true"], "env": {"PATH": _PATH}}
    try:
        proc = subprocess.run([sys.executable, "-I", "-S", _LAUNCH, json.dumps(spec)], env={"PATH": _PATH},
                              capture_output=True, timeout=20)
        return proc.returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _plan(config: SandboxConfig) -> dict[str, Any]:
    root = os.geteuid() == 0
    drop = root and config.drop_privileges
    cgroups = _cgroups_available() if config.use_cgroups is not False else ()
    want_bwrap = config.use_bwrap is not False and config.use_namespaces is not False
    bwrap = _bwrap_works(drop) if want_bwrap else None
    if bwrap:
        mode = "bwrap"
    elif config.use_namespaces is not False and _native_namespaces_work():
        mode = "native"
    else:
        mode = "plain"
    return {"root": root, "drop": drop, "cgroups": cgroups, "bwrap": bwrap, "mode": mode}


def isolation_report(config: SandboxConfig | None = None) -> dict[str, Any]:
    """What the local sandbox enforces on this machine, and what it cannot.

    :returns: ``{"mode": "bwrap"|"native"|"plain", "enforced": {mechanism: bool}, "notes": [...]}``.
    """
    config = config or SandboxConfig()
    p = _plan(config)
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
        "read_only_root_fs": p["mode"] == "bwrap",
        "pid_namespace": p["mode"] == "bwrap",
        "ipc_uts_namespaces": ns,
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
    if p["mode"] == "native":
        notes.append("bubblewrap not used: native namespaces (network, mount, IPC, UTS) without a PID "
                     "namespace; the root filesystem is not mounted read-only, so only file permissions "
                     "keep the unprivileged uid from writing (world-writable directories get a "
                     "private tmpfs)")
    if p["mode"] == "plain":
        notes.append("no namespaces: the program CAN use the network (loopback included), see the host's "
                     "/tmp and write wherever its uid may write")
    notes.append("files readable by 'other' (the installed Python, the repository) stay readable")
    return {"mode": p["mode"], "enforced": enforced, "notes": notes}


# --------------------------------------------------------------------------- stale runs

#: how often (seconds) a process looks for runs whose scorer died (see :func:`reap_stale`)
REAP_EVERY_S = 30.0
_last_reap = -REAP_EVERY_S


def _workdir_prefix(uid: int) -> str:
    return os.path.join(tempfile.gettempdir(), f"rhc-{uid}-")


def _clean_slot(uid: int, cgroups: tuple[str, ...], *, scan: bool = True) -> None:
    """Remove what an earlier holder of ``uid``'s slot left behind (the caller holds the slot).

    :param scan: look for processes of ``uid`` in ``/proc`` (not needed when a pids cgroup holds them).
    """
    if scan and os.geteuid() == 0:
        _cgroup.kill_pids(_cgroup.pids_of_uid(uid))
    if cgroups:
        _cgroup.RunCgroup(f"slot-{uid}", cgroups).destroy()
    prefix = _workdir_prefix(uid)
    base = os.path.dirname(prefix)
    for name in os.listdir(base):
        if name.startswith(os.path.basename(prefix)):
            shutil.rmtree(os.path.join(base, name), ignore_errors=True)


def reap_stale(config: SandboxConfig | None = None) -> int:
    """Clean up after runs whose scorer was killed mid-run (a reward worker past its timeout, say).

    The programs themselves die with their scorer (bubblewrap's ``--die-with-parent``, and the
    launcher's parent-death signal), but an empty cgroup and the working directory stay. For
    every slot no one holds, this kills any process of its uid and removes its cgroups and
    working directories. :func:`run_python` calls it every :data:`REAP_EVERY_S` seconds.

    :returns: how many slots were checked.
    """
    global _last_reap
    config = config or SandboxConfig()
    _last_reap = time.monotonic()
    cgroups = _cgroups_available() if config.use_cgroups is not False else ()
    n = 0
    for uid in config.uids:
        slot = try_slot(uid)
        if slot is None:
            continue
        with slot:
            _clean_slot(uid, cgroups)
            n += 1
    return n


# --------------------------------------------------------------------------- running


def _clean_env() -> dict[str, str]:
    return {"PATH": _PATH, "HOME": SANDBOX_CWD, "TMPDIR": SANDBOX_CWD, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
            "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _interpreter(config: SandboxConfig) -> tuple[str, str]:
    """(interpreter path, installation prefix to make visible inside the sandbox)."""
    if config.python:
        path = os.path.realpath(config.python)
        return path, os.path.dirname(os.path.dirname(path))
    base = getattr(sys, "_base_executable", None) or sys.executable
    return os.path.realpath(base), os.path.realpath(sys.base_prefix)


def _reachable_by_others(path: str) -> bool:
    """Whether a uid with no special rights can execute ``path`` (every parent searchable)."""
    d = os.path.dirname(path)
    while True:
        if not os.stat(d).st_mode & 0o001:
            return False
        if d == "/":
            break
        d = os.path.dirname(d)
    return bool(os.stat(path).st_mode & 0o001)


def _under(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _bwrap_argv(bwrap: str, config: SandboxConfig, workdir: str, files: list[str], uid: int | None,
                inner: list[str]) -> list[str]:
    argv = [bwrap, "--die-with-parent", "--new-session", "--unshare-net", "--unshare-pid", "--unshare-ipc",
            "--unshare-uts", "--unshare-cgroup-try", "--hostname", "sandbox", "--ro-bind", "/", "/",
            "--dev", "/dev", "--proc", "/proc"]
    size = str(config.tmpfs_mb << 20)
    _, prefix = _interpreter(config)
    hidden = False
    for d in _TMPFS + tuple(config.hide_paths):
        if os.path.isdir(d):
            argv += ["--perms", "1777" if d in _TMPFS else "0755", "--size", size, "--tmpfs", d]
            hidden = hidden or _under(prefix, d)
    if hidden:  # e.g. a pyenv Python under /root: bring back just the installation, read-only
        argv += ["--ro-bind", prefix, prefix]
    argv += ["--perms", "0777", "--dir", SANDBOX_CWD]
    for name in files:
        argv += ["--ro-bind", os.path.join(workdir, name), f"{SANDBOX_CWD}/{name}"]
    argv += ["--chdir", SANDBOX_CWD, "--"]
    if uid is not None:
        setpriv = shutil.which("setpriv", path=_PATH) or "setpriv"
        argv += [setpriv, "--reuid", str(uid), "--regid", str(uid), "--clear-groups", "--no-new-privs",
                 "--inh-caps=-all", "--bounding-set=-all"]
    return argv + inner


# The fast first stage for bubblewrap mode: a POSIX shell joins the cgroups (its pid is the one
# that execs), then prlimit sets the limits and execs bubblewrap; no second Python start-up.
_SH_LAUNCH = ('n=$1; shift; while [ "$n" -gt 0 ]; do printf %s "$$" > "$1" || '
              '{ echo "rhc-launch: cannot join cgroup $1" >&2; exit 125; }; '
              'shift; n=$((n-1)); done; exec "$@"')
_TOOL_ERRORS = ("bwrap: ", "setpriv: ", "prlimit: ")
_PRLIMIT_FLAGS = {"cpu": "--cpu", "as": "--as", "fsize": "--fsize", "nproc": "--nproc", "nofile": "--nofile",
                  "core": "--core", "stack": "--stack"}


def _shell_launch(spec: dict[str, Any]) -> list[str] | None:
    """argv for the shell launcher, or ``None`` (native/plain modes, or no ``prlimit``: the Python one)."""
    prlimit = shutil.which("prlimit", path=_PATH)
    sh = shutil.which("sh", path=_PATH)
    if spec["mode"] != "bwrap" or not prlimit or not sh:
        return None
    limits = []
    for key, value in spec["rlimits"].items():
        hard = int(value) + 1 if key == "cpu" else int(value)  # SIGXCPU first, SIGKILL a second later
        limits.append(f"{_PRLIMIT_FLAGS[key]}={int(value)}:{hard}")
    cgroups = list(spec["cgroups"])
    return [sh, "-c", _SH_LAUNCH, "rhc-launch", str(len(cgroups)), *cgroups, prlimit, *limits, "--",
            *spec["argv"]]


def _read_capped(proc: subprocess.Popen[bytes], deadline: float, cap: int) -> tuple[bytes, bytes, str | None]:
    """Read both pipes until EOF, the deadline, or ``cap`` bytes on a stream; returns the stop reason."""
    bufs = {proc.stdout: bytearray(), proc.stderr: bytearray()}
    sel = selectors.DefaultSelector()
    for f in bufs:
        assert f is not None
        os.set_blocking(f.fileno(), False)
        sel.register(f, selectors.EVENT_READ)
    reason = None
    exited_at: float | None = None
    try:
        while sel.get_map():
            now = time.monotonic()
            if now >= deadline:
                reason = "timeout"
                break
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at > 0.1:
                break  # main process gone; a leftover child holds the pipe: stop and kill it
            wait = min(deadline - now, 0.05 if exited_at is not None else 0.25)
            for key, _ in sel.select(wait):
                f = key.fileobj
                try:
                    chunk = os.read(key.fd, 65536)
                except BlockingIOError:
                    continue
                if not chunk:
                    sel.unregister(f)
                    continue
                buf = bufs[f]  # type: ignore[index]
                buf += chunk[: cap + 1 - len(buf)]
                if len(buf) > cap:
                    reason = "output_limit"
                    break
            if reason:
                break
    finally:
        sel.close()
    return bytes(bufs[proc.stdout][:cap]), bytes(bufs[proc.stderr][:cap]), reason


def _kill_everything(proc: subprocess.Popen[bytes], cg: _cgroup.RunCgroup | None, uid: int | None) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if cg is not None:
        cg.kill_all()
        if "pids" in cg.paths:
            return  # every process of the run is in its pids group (an unprivileged uid cannot leave it)
    if uid is not None:
        for _ in range(50):
            if not _cgroup.kill_pids(_cgroup.pids_of_uid(uid)):
                break
            time.sleep(0.002)


def run_python(files: dict[str, str | bytes], main: str, *, stdin: str | bytes = b"",
               args: tuple[str, ...] = (), config: SandboxConfig | None = None) -> RunResult:
    """Run ``python main`` (one of ``files``, written into the working directory) in the sandbox.

    :param files: file name (no directories) → content, placed read-only in the working directory.
    :param main: which of ``files`` to run.
    :param stdin: the program's standard input.
    :param args: extra command-line arguments.
    """
    config = config or SandboxConfig()
    plan = _plan(config)
    for name in files:
        if "/" in name or name in ("", ".", ".."):
            raise ValueError(f"bad sandbox file name {name!r}")
    started = time.monotonic()
    if started - _last_reap > REAP_EVERY_S:
        reap_stale(config)
    slot = acquire_slot(config.uids)
    uid = slot.uid if plan["drop"] else None
    cg: _cgroup.RunCgroup | None = None
    # anything a killed earlier holder of this slot left behind (its cgroup is emptied below)
    _clean_slot(slot.uid, (), scan="pids" not in plan["cgroups"])
    workdir = tempfile.mkdtemp(prefix=os.path.basename(_workdir_prefix(slot.uid)))
    try:
        if plan["cgroups"]:
            cg = _cgroup.RunCgroup(f"slot-{slot.uid}", plan["cgroups"])
            cg.create(pids_max=config.pids_max, memory_bytes=config.memory_mb << 20)
        for name, content in files.items():
            with open(os.path.join(workdir, name), "wb") as fh:
                fh.write(content.encode() if isinstance(content, str) else content)
        stdin_path = os.path.join(workdir, ".stdin")
        with open(stdin_path, "wb") as fh:
            fh.write(stdin.encode() if isinstance(stdin, str) else stdin)
        cpu = int(config.cpu_s if config.cpu_s is not None else -(-config.timeout_s // 1) + 1)
        rlimits = {"cpu": max(1, cpu), "as": config.memory_mb << 20, "fsize": config.file_size_mb << 20,
                   "nofile": 256, "core": 0}
        if uid is not None:
            rlimits["nproc"] = config.pids_max
        elif not plan["root"]:  # bounds a fork bomb to about pids_max more tasks of this user
            rlimits["nproc"] = _cgroup.tasks_of_uid(os.getuid()) + config.pids_max
        inner = [_interpreter(config)[0], *config.python_flags, main, *args]
        env = _clean_env()
        spec: dict[str, Any] = {"mode": plan["mode"], "cgroups": cg.procs_files if cg else [],
                                "rlimits": rlimits, "env": env}
        if plan["mode"] == "bwrap":
            spec["argv"] = _bwrap_argv(plan["bwrap"], config, workdir, list(files), uid, inner)
        else:
            prefix = _interpreter(config)[1]
            hide = [d for d in config.hide_paths if os.path.isdir(d)]
            spec.update(namespaces=plan["mode"] == "native", workdir=workdir, cwd=SANDBOX_CWD,
                        files=list(files), tmpfs=[d for d in _TMPFS if os.path.isdir(d)], hide=hide,
                        binds=[prefix] if any(_under(prefix, d) for d in hide) else [],
                        tmpfs_bytes=config.tmpfs_mb << 20, uid=uid, gid=uid, parent=os.getpid(),
                        argv=inner)
            if plan["mode"] == "plain":
                spec["cwd"] = os.path.join(workdir, "sandbox")
                os.chmod(workdir, 0o711)
                if uid is not None and not _reachable_by_others(inner[0]):
                    return RunResult(status="sandbox_error", stderr=(
                        f"rhc-sandbox: interpreter {inner[0]!r} is not readable by other users, and without "
                        "namespaces it cannot be mounted in: set local.python (SandboxConfig.python) to one "
                        "that is, e.g. /usr/bin/python3"), extra={"mode": "plain"})
        launch = _shell_launch(spec) or [sys.executable, "-I", "-S", _LAUNCH, json.dumps(spec)]
        with open(stdin_path, "rb") as fin:
            proc = subprocess.Popen(launch, stdin=fin,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                    cwd=workdir, start_new_session=True, close_fds=True)
        try:
            out, err, reason = _read_capped(proc, started + config.timeout_s, config.max_output_bytes)
        finally:
            _kill_everything(proc, cg, uid)
            proc.wait()
            for f in (proc.stdout, proc.stderr):
                if f is not None:
                    f.close()
        rc = proc.returncode
        sig = -rc if rc < 0 else (rc - 128 if plan["mode"] == "bwrap" and 128 < rc < 160 else None)
        stderr = err.decode("utf-8", "replace")
        oom = bool(cg and cg.memory_events())
        if reason is None and rc == 125 and stderr.startswith("rhc-launch:"):
            status = "sandbox_error"
        elif reason is None and rc != 0 and plan["mode"] == "bwrap" and stderr.startswith(_TOOL_ERRORS):
            status = "sandbox_error"  # bubblewrap, setpriv or prlimit refused before the program started
        elif reason:
            status = reason
        elif rc == 0:
            status = "ok"
        elif sig == signal.SIGXCPU:
            status = "timeout"
        elif oom or "MemoryError" in stderr[-2000:]:
            status = "memory"
        else:
            status = "error"
        return RunResult(status=status, returncode=rc, stdout=out.decode("utf-8", "replace"), stderr=stderr,
                         wall_s=time.monotonic() - started, signal=sig, extra={"mode": plan["mode"]})
    except (OSError, TimeoutError, RuntimeError) as exc:
        return RunResult(status="sandbox_error", stderr=f"rhc-sandbox: {type(exc).__name__}: {exc}",
                         wall_s=time.monotonic() - started)
    finally:
        if cg is not None and not cg.destroy():
            sys.stderr.write(f"rewardhub-code: could not empty cgroup slot-{slot.uid}\n")
        shutil.rmtree(workdir, ignore_errors=True)
        slot.release()
