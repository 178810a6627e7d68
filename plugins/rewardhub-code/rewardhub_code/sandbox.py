"""Local sandbox: run an untrusted Python program with OS-level limits, no server needed.

Every run gets a fresh session (process group), a private working directory on a size-limited
tmpfs, resource limits (CPU time, address space, file size, open files, processes), a clean
environment, a wall-clock deadline after which everything it started is killed, and capped
stdout/stderr. As root it also gets its own unprivileged uid (one per concurrent run) and a
cgroup-v1 ``pids`` and ``memory`` group. With bubblewrap it runs in new network/PID/IPC/UTS/mount
namespaces and sees only the Python runtime, read-only (see :mod:`._view`); without it, the launcher's own
network/IPC/UTS/mount namespaces (no PID namespace, root filesystem left writable to file permissions). What
is actually enforced on this machine is reported by :func:`isolation_report`; nothing is claimed
that is not.

The parts: :mod:`._config` (limits and results), :mod:`._view` (the program's filesystem),
:mod:`._plan` (what this machine can enforce), :mod:`._launch` (the child's first stage),
:mod:`._cgroup` and :mod:`._slots`. This module deliberately does not import ``rewardhub``.
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

from . import _cgroup
from . import _plan
from ._config import RunResult
from ._config import SandboxLimits
from ._plan import LAUNCH
from ._plan import isolation_report
from ._seccomp import keyring_filter
from ._slots import acquire_slot
from ._slots import try_slot
from ._view import PATH
from ._view import SANDBOX_CWD
from ._view import TMPFS
from ._view import bwrap_argv
from ._view import clean_env
from ._view import interpreter
from ._view import reachable_by_others
from ._view import runtime_paths
from ._view import under

__all__ = ["SandboxLimits", "RunResult", "run_python", "isolation_report", "reap_stale", "SANDBOX_CWD"]

# the names the tests (and older callers) reach for
_interpreter, _reachable_by_others, _clean_env = interpreter, reachable_by_others, clean_env


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


def reap_stale(config: SandboxLimits | None = None) -> int:
    """Clean up after runs whose scorer was killed mid-run (a reward worker past its timeout, say).

    The programs themselves die with their scorer (bubblewrap's ``--die-with-parent``, and the
    launcher's parent-death signal), but an empty cgroup and the working directory stay. For
    every slot no one holds, this kills any process of its uid and removes its cgroups and
    working directories. :func:`run_python` calls it every :data:`REAP_EVERY_S` seconds.

    :returns: how many slots were checked.
    """
    global _last_reap
    config = config or SandboxLimits()
    _last_reap = time.monotonic()
    cgroups = _plan._cgroups_available() if config.use_cgroups is not False else ()
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


# The fast first stage for bubblewrap mode: a POSIX shell joins the cgroups (its pid is the one
# that execs), then prlimit sets the limits and execs bubblewrap; no second Python start-up.
_SHLAUNCH = ('n=$1; shift; while [ "$n" -gt 0 ]; do printf %s "$$" > "$1" || '
              '{ echo "rhc-launch: cannot join cgroup $1" >&2; exit 125; }; '
              'shift; n=$((n-1)); done; exec "$@"')
_TOOL_ERRORS = ("bwrap: ", "setpriv: ", "prlimit: ")
_PRLIMIT_FLAGS = {"cpu": "--cpu", "as": "--as", "fsize": "--fsize", "nproc": "--nproc", "nofile": "--nofile",
                  "core": "--core", "stack": "--stack"}


def _shell_launch(spec: dict[str, Any]) -> list[str] | None:
    """argv for the shell launcher, or ``None`` (native/plain modes, or no ``prlimit``: the Python one)."""
    prlimit = shutil.which("prlimit", path=PATH)
    sh = shutil.which("sh", path=PATH)
    if spec["mode"] != "bwrap" or not prlimit or not sh:
        return None
    limits = []
    for key, value in spec["rlimits"].items():
        hard = int(value) + 1 if key == "cpu" else int(value)  # SIGXCPU first, SIGKILL a second later
        limits.append(f"{_PRLIMIT_FLAGS[key]}={int(value)}:{hard}")
    cgroups = list(spec["cgroups"])
    return [sh, "-c", _SHLAUNCH, "rhc-launch", str(len(cgroups)), *cgroups, prlimit, *limits, "--",
            *spec["argv"]]


def _read_capped(proc: subprocess.Popen[bytes], deadline: float, cap: int,
                 stdin: bytes = b"") -> tuple[bytes, bytes, str | None]:
    """Feed ``stdin`` to the program's stdin pipe (then close it) and read both output pipes until
    EOF, the deadline, or ``cap`` bytes on a stream; returns the stop reason."""
    bufs = {proc.stdout: bytearray(), proc.stderr: bytearray()}
    sel = selectors.DefaultSelector()
    for f in bufs:
        assert f is not None
        os.set_blocking(f.fileno(), False)
        sel.register(f, selectors.EVENT_READ)
    pending = memoryview(stdin)
    if proc.stdin is not None:
        if pending:
            os.set_blocking(proc.stdin.fileno(), False)
            sel.register(proc.stdin, selectors.EVENT_WRITE)
        else:
            proc.stdin.close()
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
                stream: Any = key.fileobj
                if stream is proc.stdin and proc.stdin is not None:
                    try:
                        pending = pending[os.write(key.fd, pending[:65536]):]
                    except BlockingIOError:
                        continue
                    except OSError:  # the program closed its stdin or exited: the rest is not read
                        pending = pending[:0]
                    if not pending:
                        sel.unregister(proc.stdin)
                        proc.stdin.close()
                    continue
                try:
                    chunk = os.read(key.fd, 65536)
                except BlockingIOError:
                    continue
                if not chunk:
                    sel.unregister(stream)
                    continue
                buf = bufs[stream]
                buf += chunk[: cap + 1 - len(buf)]
                if len(buf) > cap:
                    reason = "output_limit"
                    break
            if reason:
                break
    finally:
        sel.close()
        if proc.stdin is not None and not proc.stdin.closed:
            proc.stdin.close()
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
               args: tuple[str, ...] = (), config: SandboxLimits | None = None) -> RunResult:
    """Run ``python main`` (one of ``files``, written into the working directory) in the sandbox.

    :param files: file name (no directories) → content, placed read-only in the working directory.
    :param main: which of ``files`` to run.
    :param stdin: the program's standard input.
    :param args: extra command-line arguments.
    """
    config = config or SandboxLimits()
    plan = _plan.isolation_plan(config)
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
    seccomp_fd: int | None = None
    pass_fds: tuple[int, ...] = ()
    try:
        if plan["cgroups"]:
            cg = _cgroup.RunCgroup(f"slot-{slot.uid}", plan["cgroups"])
            cg.create(pids_max=config.pids_max, memory_bytes=config.memory_mb << 20)
        for name, content in files.items():
            with open(os.path.join(workdir, name), "wb") as fh:
                fh.write(content.encode() if isinstance(content, str) else content)
        cpu = int(config.cpu_s if config.cpu_s is not None else -(-config.timeout_s // 1) + 1)
        rlimits = {"cpu": max(1, cpu), "as": config.memory_mb << 20, "fsize": config.file_size_mb << 20,
                   "nofile": 256, "core": 0}
        if uid is not None:
            rlimits["nproc"] = config.pids_max
        elif not plan["root"]:  # bounds a fork bomb to about pids_max more tasks of this user
            rlimits["nproc"] = _cgroup.tasks_of_uid(os.getuid()) + config.pids_max
        inner = [interpreter(config)[0], *config.python_flags, main, *args]
        env = clean_env()
        spec: dict[str, Any] = {"mode": plan["mode"], "cgroups": cg.procs_files if cg else [],
                                "rlimits": rlimits, "env": env}
        seccomp = keyring_filter()
        if plan["mode"] == "bwrap":
            if seccomp is not None:  # bubblewrap reads the filter from a pipe before it runs the program
                seccomp_fd, w = os.pipe()
                os.write(w, seccomp)
                os.close(w)
                pass_fds = (seccomp_fd,)
            spec["argv"] = bwrap_argv(plan["bwrap"], config, workdir, list(files), uid, inner,
                                      seccomp_fd=seccomp_fd)
        else:
            if seccomp is not None:  # the launcher installs it just before it runs the program
                spec["seccomp"] = seccomp.hex()
            prefix = interpreter(config)[1]
            hide = [d for d in config.hide_paths if os.path.isdir(d)]
            spec.update(namespaces=plan["mode"] == "native", workdir=workdir, cwd=SANDBOX_CWD,
                        files=list(files), tmpfs=[d for d in TMPFS if os.path.isdir(d)], hide=hide,
                        binds=[prefix] if any(under(prefix, d) for d in hide) else [],
                        tmpfs_bytes=config.tmpfs_mb << 20, uid=uid, gid=uid, parent=os.getpid(),
                        argv=inner)
            if plan["mode"] == "native":  # a root of its own with the runtime only (see _launch)
                spec["runtime"] = runtime_paths(config)
            if plan["mode"] == "plain":
                spec["cwd"] = os.path.join(workdir, "sandbox")
                os.chmod(workdir, 0o711)
                if uid is not None and not reachable_by_others(inner[0]):
                    return RunResult(status="sandbox_error", stderr=(
                        f"rhc-sandbox: interpreter {inner[0]!r} is not readable by other users, and without "
                        "namespaces it cannot be mounted in: set local.python (SandboxLimits.python) to one "
                        "that is, e.g. /usr/bin/python3"), extra={"mode": "plain"})
        launch = _shell_launch(spec) or [sys.executable, "-I", "-S", LAUNCH, json.dumps(spec)]
        # stdin is a pipe (not a file the program could seek back in), fed while the output is read
        try:
            proc = subprocess.Popen(launch, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, env=env, cwd=workdir, start_new_session=True,
                                    close_fds=True, pass_fds=pass_fds)
        finally:
            if seccomp_fd is not None:
                os.close(seccomp_fd)
                seccomp_fd = None
        try:
            out, err, reason = _read_capped(proc, started + config.timeout_s, config.max_output_bytes,
                                            stdin.encode() if isinstance(stdin, str) else stdin)
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
        if seccomp_fd is not None:
            os.close(seccomp_fd)
        if cg is not None and not cg.destroy():
            sys.stderr.write(f"rewardhub-code: could not empty cgroup slot-{slot.uid}\n")
        shutil.rmtree(workdir, ignore_errors=True)
        slot.release()
