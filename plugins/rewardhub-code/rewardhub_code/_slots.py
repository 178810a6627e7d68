"""A pool of unprivileged uids, one per concurrent run, shared by every process on the machine.

Each run holds an exclusive ``flock`` on its uid's lock file, so two concurrent runs (in any
threads or processes) never share a uid: one program cannot signal another's processes, and
"every process of this uid" is exactly "what this run left behind". The lock is released by the
kernel when its holder dies, and whoever takes the slot next first kills anything still running
under that uid.
"""

from __future__ import annotations

import fcntl
import os
import random
import tempfile
import time

__all__ = ["Slot", "acquire_slot", "lock_dir", "try_slot"]


def lock_dir() -> str:
    """A directory only the scoring user can write, for the slot lock files."""
    base = "/run" if os.geteuid() == 0 and os.path.isdir("/run") else tempfile.gettempdir()
    path = os.path.join(base, f"rewardhub-code-slots-{os.geteuid()}")
    os.makedirs(path, mode=0o700, exist_ok=True)
    st = os.stat(path)
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise RuntimeError(f"slot lock directory {path} is not private to uid {os.geteuid()}")
    return path


class Slot:
    """A held uid; release with :meth:`release` (or use as a context manager)."""

    def __init__(self, uid: int, fd: int) -> None:
        self.uid = uid
        self._fd: int | None = fd

    def release(self) -> None:
        """Drop the lock (idempotent)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    def __enter__(self) -> Slot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def try_slot(uid: int, directory: str | None = None) -> Slot | None:
    """Lock ``uid``'s slot if no one holds it (without waiting), else ``None`` (``directory``: the
    :func:`lock_dir` already found)."""
    path = os.path.join(directory or lock_dir(), f"{uid}.lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return Slot(uid, fd)


def acquire_slot(uids: range, wait_s: float = 60.0) -> Slot:
    """Lock a free uid from ``uids``, waiting up to ``wait_s`` seconds for one.

    :raises TimeoutError: when every uid stayed busy.
    """
    directory = lock_dir()
    order = list(uids)
    end = time.monotonic() + wait_s
    while True:
        random.shuffle(order)  # spread concurrent callers over the pool
        for uid in order:
            slot = try_slot(uid, directory)
            if slot is not None:
                return slot
        if time.monotonic() > end:
            raise TimeoutError(f"no free sandbox uid in {uids} after {wait_s:g}s")
        time.sleep(0.01)
