"""The process pool's workers: the loop a worker runs, and the pool's handle on one.

A worker runs chunks of calls sent over its connection; before each call it claims the call's
number in a small shared array, so that the pool can take back the calls it has not started (see
:meth:`Worker.take_back`).
"""

from __future__ import annotations

import collections
import contextlib
import gc
import inspect
import os
import pickle
import select
import signal
import sys
import time
from typing import TYPE_CHECKING
from typing import Any

from ._answers import answer
from ._answers import read_answer
from ._lasting import in_lasting_thread

if TYPE_CHECKING:
    from ._task import Task
    from ._task import WorkerPayload


try:
    _HZ = float(os.sysconf("SC_CLK_TCK"))
except (AttributeError, ValueError, OSError):
    _HZ = 100.0


# ---------------------------------------------------------------------------- worker side
def build_invoker(payload: WorkerPayload) -> Any:
    """The reward's invoker, rebuilt in this process from its payload."""
    import functools

    from .._targets import load_target
    from ._calls import make_invoker

    fn = load_target(payload.target, payload.sha256)
    if payload.params:
        fn = functools.partial(fn, **dict(payload.params))
    return make_invoker(fn, payload.kind, payload.adapter, payload.name)


def run_call(inv: Any, mode: str, data: Any, kwargs: dict[str, Any]) -> Any:
    """One call of an invoker on a sample (``mode == "one"``) or a list of them, awaited if async."""
    raw = inv.call_one(data, kwargs) if mode == "one" else inv.call_many(data, kwargs)
    if inspect.isawaitable(raw):
        from ._local import run_awaitable  # asyncio imported only here: most rewards never need it

        raw = run_awaitable(raw)
    return raw


def detach() -> None:
    """A pool process's start: its own process group (so a kill takes whatever it started), killed
    with its parent, deaf to the terminal's Ctrl-C (the parent handles it), torch on one thread."""
    os.setpgrp()
    if sys.platform.startswith("linux"):  # the kernel SIGKILLs it when the parent dies: no orphan lives on
        with contextlib.suppress(OSError, AttributeError):
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
            if os.getppid() == 1:  # the parent died before we got here
                os._exit(1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # a fork of a parent that has run torch ops keeps torch to one thread: torch's OpenMP thread pool
    # does not survive fork, and a child that uses more threads hangs for ever
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "set_num_threads"):
        torch.set_num_threads(1)


def tell_to_stop(conn: Any) -> None:
    """Ask a pool process to exit (it may be gone already)."""
    with contextlib.suppress(BrokenPipeError, OSError):
        conn.send(None)


def _data_bytes() -> int:
    """This process's data segment now (``VmData``: heap and private mappings), 0 where unknown."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmData:"):
                    return int(line.split()[1]) * 1024
    return 0


class _MemoryLimit:
    """The worker's data-segment limit (``RLIMIT_DATA``: heap and private mappings), set while a
    reward's calls run to what the worker had when it started (inherited from the scoring process
    it was forked from) plus the reward's ``memory_limit_mb``; lowering and raising the soft limit
    is allowed up to the hard one."""

    def __init__(self) -> None:
        try:
            import resource

            self._resource: Any = resource
            self._hard = resource.getrlimit(resource.RLIMIT_DATA)[1]
        except (ImportError, AttributeError, OSError):
            self._resource = None
        self._base = _data_bytes()
        self._now: int | None = None

    def set(self, mb: int | None) -> None:
        if mb == self._now or self._resource is None:
            return
        r = self._resource
        soft = r.RLIM_INFINITY if mb is None else self._base + (int(mb) << 20)
        if self._hard != r.RLIM_INFINITY and (soft == r.RLIM_INFINITY or soft > self._hard):
            soft = self._hard
        with contextlib.suppress(ValueError, OSError):
            r.setrlimit(r.RLIMIT_DATA, (soft, self._hard))
            self._now = mb


def worker_main(conn: Any, claim: Any, lock: Any) -> None:
    """Run chunks of calls; before each call, claim it (``claim[0]`` = its number), unless the
    parent has taken it back (numbers in ``claim[1] <= n < claim[2]`` went to other workers)."""
    detach()
    invokers: dict[str, Any] = {}
    limits: dict[str, int | None] = {}
    memory = _MemoryLimit()
    clock = time.perf_counter
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):  # the pool is gone
            return
        if msg is None:  # told to stop
            return
        key, payload, kwargs, seq, items = msg
        build_error = None
        if key not in invokers:
            limits[key] = getattr(payload, "memory_limit_mb", None)
            try:
                invokers[key] = build_invoker(payload)
            except BaseException as exc:  # noqa: BLE001 - reported per call below
                build_error = f"cannot load the reward in the worker: {type(exc).__name__}: {exc}"
        inv = invokers.get(key)
        memory.set(limits.get(key))
        for j, (mode, data) in enumerate(items, seq):
            with lock:
                if claim[1] <= j < claim[2]:
                    continue  # taken back while we were busy with an earlier call
                claim[0] = j
            start = clock()
            if inv is None:
                reply: tuple[Any, ...] = (j, "error", build_error, 0.0, time.monotonic(), False)
            else:
                reply = answer(j, lambda: run_call(inv, mode, data, kwargs), clock, start)
            try:
                conn.send_bytes(pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL))
            except OSError:  # the pool is gone
                return
            if reply[5]:  # out of memory: a fresh worker takes this one's place and its calls
                return


# ---------------------------------------------------------------------------- parent side
class Worker:
    """The pool's handle on one worker process, and the calls it has been sent."""

    def __init__(self, conn: Any, claim: Any, lock: Any, proc: Any) -> None:
        self.conn = conn
        #: [number of the call it runs, first and end number taken back]; read and written under lock
        self.claim = claim
        self.lock = lock
        self.proc = proc  # a multiprocessing.Process
        self.known: set[str] = set()
        #: tasks sent and not yet answered, in the order the worker runs them
        self.inflight: collections.deque[Task] = collections.deque()
        self.seqs: collections.deque[int] = collections.deque()  # their call numbers
        self.chunk_of: collections.deque[int] = collections.deque()  # their chunk numbers
        self.sent = 0  # calls sent so far (the next call's number)
        self.chunks_sent = 0
        self.started = 0.0  # when the running call (inflight[0]) started, monotonic
        #: the running call's last look: (when, CPU seconds then, asleep then); whether it waits
        #: rather than computes (None: not known yet); when to look next
        self.probe: tuple[float, float, bool] | None = None
        self.idle: bool | None = None
        self.next_look = 0.0
        # whether a reply is waiting, in one syscall (``Connection.poll`` builds a selector per call,
        # tens of microseconds the pool's loop would pay per reply)
        self._replies = select.poll()
        self._replies.register(conn.fileno(), select.POLLIN)

    def read(self) -> tuple[str, Any]:
        """The next message, without waiting: ``("ok", answer)`` the answer to the running call;
        ``("none", None)`` nothing waiting; ``("dead", None)`` the pipe has ended; ``("stray", None)``
        an answer to a call answered before; ``("bad", what)`` anything else (a reward wrote to the
        pipe itself, or answered out of turn: the worker cannot be trusted)."""
        try:
            if not self._replies.poll(0):  # no reply (nor the pipe's end: the worker died) to read
                return "none", None
            data = self.conn.recv_bytes()
        except (EOFError, OSError):
            return "dead", None
        answer = read_answer(data)
        running = self.seqs[0] if self.seqs else None
        if answer is not None and (running is None or answer[0] < running):
            return "stray", None
        if answer is None or answer[0] != running:
            got = "an unreadable message" if answer is None else f"an answer to call {answer[0]}"
            return "bad", f"{got} while running call {running}"
        return "ok", answer

    def _stat(self) -> list[bytes]:
        """The fields of Linux's ``/proc/PID/stat`` after the command's name (none where unknown)."""
        try:
            with open(f"/proc/{self.proc.pid}/stat", "rb") as f:
                return f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            return []

    def state(self) -> str | None:
        """The worker's scheduler state (``R`` running, ``S`` sleeping, ...) from Linux ``/proc``."""
        fields = self._stat()
        return fields[0].decode() if fields else None

    def cpu_s(self) -> float | None:
        """CPU seconds this worker has used (Linux ``/proc``); ``None`` where unknown."""
        with contextlib.suppress(OSError, IndexError, ValueError):
            with open(f"/proc/{self.proc.pid}/schedstat", "rb") as f:
                ns = int(f.read().split()[0])
            if ns:  # 0 where the kernel keeps no schedstats
                return ns / 1e9
        fields = self._stat()
        try:
            return (int(fields[11]) + int(fields[12])) / _HZ
        except (IndexError, ValueError):
            return None

    @classmethod
    def fork(cls, ctx: Any) -> Worker:
        """A new worker forked from this process."""
        parent, child = ctx.Pipe()
        claim, lock = ctx.RawArray("q", [-1, 0, 0]), ctx.Lock()
        proc = ctx.Process(
            target=worker_main, args=(child, claim, lock), daemon=True, name="rewardhub-worker"
        )
        # a forked child's garbage collector would walk (and so copy, page by page) every object it
        # inherited; frozen objects are left alone (in the child: the parent unfreezes its own)
        gc.freeze()
        try:
            in_lasting_thread(proc.start)  # its parent thread must outlive it (PR_SET_PDEATHSIG)
        finally:
            gc.unfreeze()
        child.close()
        return cls(parent, claim, lock, proc)

    # ---- the calls in flight ------------------------------------------------------------
    def encode(self, chunk: list[Task], payloads: dict[str, WorkerPayload]) -> bytes:
        """The message of a chunk of calls (the reward's payload the first time this worker runs it)."""
        key = chunk[0].key
        payload = None if key in self.known else payloads[key]
        return pickle.dumps((key, payload, chunk[0].kwargs, self.sent, [(t.mode, t.payload) for t in chunk]),
                            protocol=pickle.HIGHEST_PROTOCOL)

    def send(self, chunk: list[Task], data: bytes, now: float) -> None:
        """Send a chunk of calls (``data``, its message) to run after those in flight."""
        self.conn.send_bytes(data)
        self.known.add(chunk[0].key)
        if not self.inflight:
            self.started = now
        self.inflight.extend(chunk)
        self.seqs.extend(range(self.sent, self.sent + len(chunk)))
        self.chunk_of.extend([self.chunks_sent] * len(chunk))
        self.sent += len(chunk)
        self.chunks_sent += 1

    def pop(self) -> Task:
        """The running call, answered: it leaves the calls in flight."""
        self.seqs.popleft()
        self.chunk_of.popleft()
        return self.inflight.popleft()

    def unstarted(self, running: bool = True) -> list[Task]:
        """Forget every call in flight (the worker is dead, or stops); returns those it never started,
        in order (``running``: the first of them had started)."""
        rest = list(self.inflight)[1 if running else 0:]
        self.inflight.clear()
        self.seqs.clear()
        self.chunk_of.clear()
        return rest

    def take_back(self) -> list[Task]:
        """Take back the calls queued behind the running one that the worker has not started (it
        skips them from now on); returns them in order, none when it may have started them all."""
        if len(self.inflight) < 2 or not self.lock.acquire(timeout=0.05):
            return []
        try:
            running = self.claim[0]
            if running < self.seqs[0]:  # not yet started on these at all: slow to start, not stuck
                return []
            first, end = running + 1, self.seqs[-1] + 1
            if first >= end:
                return []
            self.claim[1], self.claim[2] = first, end
        finally:
            self.lock.release()
        keep = sum(1 for q in self.seqs if q < first)
        back = list(self.inflight)[keep:]
        for _ in back:
            self.inflight.pop()
            self.seqs.pop()
            self.chunk_of.pop()
        return back

    @property
    def task(self) -> Task | None:
        return self.inflight[0] if self.inflight else None

    def stop(self) -> None:
        """Ask the worker to exit; kill it if it does not within 2 s."""
        tell_to_stop(self.conn)
        self.proc.join(2)
        if self.proc.is_alive():
            self.kill()
        else:
            self.conn.close()

    def kill(self, wait: bool = True) -> None:
        """SIGKILL the worker's process group; with ``wait=False`` the caller reaps it later
        (the kernel takes ~10 ms to tear a forked worker down, which the pool need not wait for)."""
        pid = self.proc.pid
        if pid is not None:
            for send in (os.killpg, os.kill):  # its group, and itself (if it has no group of its own yet)
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    send(pid, signal.SIGKILL)
        self.conn.close()
        if wait:
            self.proc.join(5)
