"""Warm spares: a template process that has run a reward forks the process pool's new workers.

A worker forked from the pool's own process starts cold: the reward's caches (sympy's, a parser's,
its ``lru_cache`` s) are empty, and math_verify's first hundred calls in it cost ~30 ms more than a
long-lived worker's. When hung calls keep replacing workers, nearly every worker is new, and that is
most of what a hang costs beyond its timeout. So once a fast reward has answered enough calls, the
pool forks one template process, which replays up to :data:`WARM_CALLS` of those recent calls
(results dropped) and from then on forks each new worker in the pool's stead: warm, and without the
pool's loop waiting on a fork, as the template keeps one forked standby ready.

Only rewards declared ``pure`` (``@reward(pure=True)`` or a config term's ``pure: true``: no side
effects, so a second call on a sample does no harm) and whose mean call takes at most
:data:`WARM_MAX_CALL_S` are replayed (those for which a cold start weighs); every other reward is
never called twice on a sample, and ``ProcessPool(warm_spares=False)`` turns replay off for all.
Linux only (``pidfd_open`` and the ``fork`` start method).
"""

from __future__ import annotations

import gc
import multiprocessing.connection
import os
import signal
import socket
import time
from multiprocessing import reduction
from typing import Any

from ._lasting import in_lasting_thread
from ._worker import build_invoker
from ._worker import detach
from ._worker import next_message
from ._worker import run_call
from ._worker import tell_to_stop
from ._worker import worker_main

__all__ = ["Template", "WARM_CALLS", "WARM_MAX_CALL_S", "WARM_MIN_CALLS", "supported"]

#: recent calls of a reward replayed in the template, and the fewest worth a template
WARM_CALLS = 256
WARM_MIN_CALLS = 32
#: only rewards this fast on average are replayed
WARM_MAX_CALL_S = 0.01
#: a template that has not warmed up by then is given up (a replayed call that hangs; a loaded host
#: can take many seconds to replay WARM_CALLS calls)
WARM_LIMIT_S = 30.0
#: how long the pool waits for a standby's descriptor once its pid came (sent right after it)
TAKE_LIMIT_S = 1.0
#: how long a standby asked for may take to come before the pool forks its spares itself
PENDING_LIMIT_S = 0.25
_RUNNING = -(1 << 40)  # exit code slot: not exited (or not yet reaped)


def supported(ctx: Any) -> bool:
    return hasattr(os, "pidfd_open") and ctx.get_start_method() == "fork"


# ---------------------------------------------------------------------------- template side
def _template_main(conn: Any, claims: list[Any], locks: list[Any], codes: Any) -> None:
    detach()
    pool_pid = os.getppid()
    first = next_message(conn)
    if first is None:
        return
    _, work, slot = first
    for key, payload, kwargs, items in work:
        try:
            inv = build_invoker(payload)
        except BaseException:  # noqa: BLE001 - the workers report it, per call
            continue
        for mode, data in items:
            try:
                run_call(inv, mode, data, kwargs)
            except BaseException:  # noqa: BLE001 - a replayed call's outcome is dropped
                pass
    gc.collect()
    gc.freeze()  # what the workers inherit is never walked (so never copied) by their collectors
    kids: dict[int, tuple[int, int]] = {}  # pidfd -> (pid, slot)

    def fork_standby(slot: int) -> tuple[int, int, socket.socket]:
        ours, theirs = socket.socketpair()
        pid = os.fork()
        if pid == 0:  # the new worker
            try:
                conn.close()
                ours.close()
                for fd in kids:
                    os.close(fd)
                worker_main(multiprocessing.connection.Connection(theirs.detach()), claims[slot], locks[slot])
            finally:
                os._exit(0)
        theirs.close()
        kids[os.pidfd_open(pid)] = (pid, slot)
        return pid, slot, ours

    def push(standby: tuple[int, int, socket.socket]) -> None:
        """Hand a standby over before the pool asks: taking it then costs the pool no round trip
        (on a loaded host the template may wait long for a core to answer on)."""
        pid, kid_slot, ours = standby
        conn.send((pid, kid_slot))
        reduction.send_handle(conn, ours.fileno(), pool_pid)
        ours.close()

    conn.send(("ready",))
    push(fork_standby(slot))
    while True:
        for obj in multiprocessing.connection.wait([conn, *kids]):
            if not isinstance(obj, int):  # the pool's connection: read below
                continue
            pid, kid_slot = kids.pop(obj)  # a worker exited: reap it, say how
            _, status = os.waitpid(pid, 0)
            codes[kid_slot] = os.waitstatus_to_exitcode(status)
            os.close(obj)
        if not conn.poll():
            continue
        msg = next_message(conn)
        if msg is None:
            return
        push(fork_standby(msg[1]))  # ("take", slot): the pool took the last one


# ---------------------------------------------------------------------------- pool side
class _Foreign:
    """The pool's view of a worker the template forked: what ``multiprocessing.Process`` offers,
    through a pidfd (the worker is the template's child, not the pool's)."""

    def __init__(self, template: Template, pid: int, slot: int) -> None:
        self.pid, self.slot, self._template = pid, slot, template
        self.sentinel: int | None = os.pidfd_open(pid)  # OSError: gone already (take() says so)

    def is_alive(self) -> bool:
        return self.sentinel is not None and not multiprocessing.connection.wait([self.sentinel], 0)

    def join(self, timeout: float | None = None) -> None:
        if self.sentinel is None:
            return
        deadline = None if timeout is None else time.monotonic() + timeout
        if not multiprocessing.connection.wait([self.sentinel], timeout):
            return
        while self._template.codes[self.slot] == _RUNNING and self._template.alive():
            if deadline is not None and time.monotonic() >= deadline:
                return
            time.sleep(0.001)

    @property
    def orphaned(self) -> bool:
        """Whether the template is gone (its workers die with it, whatever they were doing)."""
        return not self._template.proc.is_alive()

    @property
    def exitcode(self) -> int | None:
        if self.is_alive():
            return None
        code = self._template.codes[self.slot]
        return None if code == _RUNNING else int(code)

    def release(self) -> None:
        """After the worker is dead: close the pidfd; its slot is reused once the template reaped it."""
        if self.sentinel is not None:
            os.close(self.sentinel)
            self.sentinel = None
            if self._template.codes[self.slot] != _RUNNING:
                self._template.free.append(self.slot)


class Template:
    """The pool's handle on its template process (see the module's text)."""

    def __init__(self, ctx: Any, slots: int, work: list[tuple[str, Any, dict[str, Any], list[Any]]]) -> None:
        #: each worker's claim array and lock (see ``worker_main``), made here so that the
        #: template's children inherit them; a slot is reused once its last worker was reaped
        self.claims = [ctx.RawArray("q", [-1, 0, 0]) for _ in range(slots)]
        self.locks = [ctx.Lock() for _ in range(slots)]
        self.codes = ctx.RawArray("q", [_RUNNING] * slots)
        self.free = list(range(slots - 1, 0, -1))
        parent, child = ctx.Pipe()
        self.proc = ctx.Process(target=_template_main, args=(child, self.claims, self.locks, self.codes),
                                daemon=True, name="rewardhub-template")
        gc.freeze()
        try:
            in_lasting_thread(self.proc.start)  # its parent thread must outlive it (PR_SET_PDEATHSIG)
        finally:
            gc.unfreeze()
        child.close()
        self.conn = parent
        self.state = "warming"  # -> "ready", or "broken" for good
        self.since = time.monotonic()
        #: the standby handed over and not yet taken; when the next one was asked for (None: it came)
        self._standby: tuple[Any, int, int] | None = None
        self.asked: float | None = self.since
        self.conn.send(("warm", work, 0))

    def alive(self) -> bool:
        return self.state != "broken" and self.proc.is_alive()

    def ready(self) -> bool:
        if self.state == "warming":
            try:
                if self.conn.poll():
                    self.state = "ready" if self.conn.recv() == ("ready",) else "broken"
                    self.asked = time.monotonic()  # the first standby follows
                elif not self.proc.is_alive() or time.monotonic() - self.since > WARM_LIMIT_S:
                    self.state = "broken"
            except (EOFError, OSError):
                self.state = "broken"
            if self.state == "broken":
                self.close()
        return self.state == "ready"

    def _receive(self) -> None:
        """Read the standby the template handed over, if it has come."""
        try:
            if self._standby is None and self.conn.poll():
                pid, slot = self.conn.recv()
                if not self.conn.poll(TAKE_LIMIT_S):
                    raise TimeoutError
                self._standby = (reduction.recv_handle(self.conn), pid, slot)
                self.asked = None
        except (EOFError, OSError, TimeoutError, ValueError, TypeError):
            self.state = "broken"
            self.close()

    def _ask(self) -> None:
        """Ask for the next standby (forked while the pool goes on), unless one is there or on its
        way, or no slot is free (then at a later call, once a dead worker's slot came back)."""
        if self._standby is not None or self.asked is not None or not self.free or self.state != "ready":
            return
        nxt = self.free.pop()
        self.claims[nxt][:] = [-1, 0, 0]
        self.codes[nxt] = _RUNNING
        try:
            self.conn.send(("take", nxt))
            self.asked = time.monotonic()
        except OSError:
            self.state = "broken"

    def coming(self) -> bool:
        """Whether a standby was asked for a moment ago and should come soon (worth waiting for)."""
        return (self.state == "ready" and self._standby is None and self.asked is not None
                and time.monotonic() - self.asked < PENDING_LIMIT_S)

    def take(self, wait: bool = False) -> tuple[Any, Any, Any, _Foreign] | None:
        """The standby worker (connection, claim, lock, process) for the pool; None: none is there
        (fork it yourself, or try again while :meth:`coming`). With ``wait``, a standby that is
        :meth:`coming` is waited for (at most what is left of :data:`PENDING_LIMIT_S`)."""
        if not self.ready():
            return None
        self._ask()
        if wait and self.coming() and self.asked is not None:
            try:
                self.conn.poll(max(0.0, self.asked + PENDING_LIMIT_S - time.monotonic()))
            except (EOFError, OSError):
                pass
        self._receive()
        if self._standby is None or self.state != "ready":
            return None
        fd, pid, slot = self._standby
        self._standby = None
        self.asked = None
        self._ask()
        conn = multiprocessing.connection.Connection(fd)
        try:
            proc = _Foreign(self, pid, slot)
        except OSError:  # died before it was handed over: the template reaps it; fork one here
            conn.close()
            if self.state == "broken":
                self.close()
            return None
        if self.state == "broken":
            self.close()
        return conn, self.claims[slot], self.locks[slot], proc

    def close(self) -> None:
        if self._standby is not None:  # never taken: it exits on its connection's end
            os.close(self._standby[0])
            self._standby = None
        if self.state != "broken":
            self.state = "broken"
            tell_to_stop(self.conn)
            self.proc.join(2)
        if self.proc.is_alive():
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.join(2)
        self.conn.close()
