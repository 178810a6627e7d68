"""The process pool's callers: several threads may run batches on one pool at once.

Each caller's tasks join one queue that all share; one caller at a time drives the pool (sends the
calls, collects the answers, kills hung ones) for everyone, and hands that job on once its own tasks
are done. :class:`Callers` owns what the callers share: the tasks not yet taken into the pool's
queue, who drives, and a wake-up pipe that ends the driver's wait in ``poll()`` when calls come.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Any

from ..errors import RewardhubError
from ._task import Task

if TYPE_CHECKING:
    from ._fair import FairQueue

__all__ = ["CANCELLED", "Batch", "Callers", "Cancel", "until_cancelled"]


class Cancel:
    """Set by whoever waits for a batch once it stops waiting (a cancelled ``score_async``): the
    batch's calls not yet sent to a worker are dropped, and its ``score`` raises."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._set = False
        self._hooks: list[Callable[[], None]] = []
        #: where the scoring stopped, the terms' columns as far as they were filled (a term's calls not
        #: made have :data:`CANCELLED` in their error; a column shorter than the batch ends early)
        self.kept: dict[str, Any] | None = None

    def set(self) -> None:
        with self._lock:
            self._set = True
            hooks, self._hooks = self._hooks, []
        for hook in hooks:
            hook()

    def is_set(self) -> bool:
        return self._set

    def on_set(self, hook: Callable[[], None]) -> None:
        """Call ``hook`` once this is set (now, if it is)."""
        with self._lock:
            if not self._set:
                self._hooks.append(hook)
                return
        hook()


#: the error of a call not made because its caller stopped waiting
CANCELLED = "scoring cancelled: its caller stopped waiting for the scores"


def cancelled_error() -> Exception:
    return RewardhubError(CANCELLED)


class until_cancelled(Sequence[Callable[[], Any]]):  # noqa: N801 - reads as the function it stands for
    """``calls`` (reward calls made in this process), each of which, once ``cancel`` is set, fails at
    once instead of calling its reward: a caller that went away stops costing calls (a judge's)."""

    def __init__(self, calls: Sequence[Callable[[], Any]], cancel: Cancel) -> None:
        self._calls, self._cancel = calls, cancel

    def __len__(self) -> int:
        return len(self._calls)

    def __getitem__(self, k: Any) -> Any:
        if isinstance(k, slice):
            return [self[j] for j in range(*k.indices(len(self)))]
        call, cancel = self._calls[k], self._cancel

        def guarded() -> Any:
            if cancel.is_set():
                raise cancelled_error()
            return call()

        return guarded


class Batch:
    """One caller's share of the pool's work: how many of its tasks are not done yet."""

    __slots__ = ("cancelled", "done", "error", "left")

    def __init__(self, left: int, done: Callable[[Task], None]) -> None:
        self.left = left
        #: called once per finished task, in the thread driving the pool at the time
        self.done = done
        #: what ``done`` raised (raised again in the caller's own thread)
        self.error: Exception | None = None
        #: its caller stopped waiting: its calls not yet sent are dropped (by the driver)
        self.cancelled = False


class Callers:
    """The callers of one pool (see the module's text)."""

    def __init__(self) -> None:
        self._incoming: list[Task] = []  # under _cond: tasks the driver has not taken yet
        self._cond = threading.Condition()
        self.driving = False  # a caller drives the pool now
        self._driver: int | None = None  # the driving thread's ident
        self.closed = False
        self._shut = False
        #: closed while a caller drives: the driver fails every call left and stops
        self.closing = False
        #: some batch was cancelled: the driver drops its calls
        self.cancels = False
        self.wake_fd, self._wake_w = os.pipe()
        os.set_blocking(self.wake_fd, False)
        os.set_blocking(self._wake_w, False)

    def join(self, tasks: list[Task], done: Callable[[Task], None], cancel: Cancel | None = None) -> Batch:
        """Queue a caller's tasks; returns once they are done by another caller's driving, or once
        this caller is to drive (then ``batch.left`` > 0 and it must call :meth:`hand_on` after)."""
        batch = Batch(len(tasks), done)
        for t in tasks:
            t.owner = batch
        with self._cond:
            if self.closed:
                raise RewardhubError("the reward runner is closed")
            if cancel is not None and cancel.is_set():
                raise cancelled_error()
            self._incoming.extend(tasks)
            self._wake()
            if cancel is not None:
                cancel.on_set(lambda: self._cancel(batch))
            while batch.left and self.driving:
                self._cond.wait()
            if batch.left:  # this caller drives now
                self.driving = True
                self._driver = threading.get_ident()
        return batch

    def _wake(self) -> None:
        """End the driver's wait in ``poll()`` (under _cond)."""
        if self.driving:
            with contextlib.suppress(OSError):  # the pipe is full: a wake-up is pending anyway
                os.write(self._wake_w, b"w")

    def _cancel(self, batch: Batch) -> None:
        with self._cond:
            batch.cancelled = True
            self.cancels = True
            self._wake()

    def drop_cancelled(self, queue: FairQueue) -> None:
        """Drop the calls of cancelled batches that no worker has started (the driver's thread)."""
        self.take(queue)
        with self._cond:
            self.cancels = False
        for owner in queue.owners():
            if owner is not None and owner.cancelled:
                self.abort(queue.drop(owner), cancelled_error())

    def hand_on(self) -> None:
        """The driver's own tasks are done (or it stopped): another caller may drive."""
        with self._cond:
            self.driving = False
            self._cond.notify_all()

    @property
    def waiting(self) -> bool:
        return bool(self._incoming)

    def take(self, queue: FairQueue) -> None:
        """Move the tasks that came into the pool's queue (the driver's thread).

        The wake-up pipe is emptied *before* the tasks are moved: a caller that joins in between
        has its tasks moved too, and one that joins after leaves its byte in the pipe, so the
        driver's next ``poll()`` returns. (Emptied after, a byte could be read whose tasks were
        not moved; they then waited until some other event, up to a call's whole timeout.)"""
        with contextlib.suppress(OSError):  # raised once there is nothing more to read
            while os.read(self.wake_fd, 4096):
                pass
        with self._cond:
            queue.extend(self._incoming)
            self._incoming.clear()

    def finished(self, task: Task) -> None:
        """A task has its result: tell its caller (woken when its batch is done)."""
        batch = task.owner
        if batch is None:
            return
        try:
            batch.done(task)
        except Exception as exc:  # the callback's failure is its caller's, raised in its own thread
            if batch.error is None:
                batch.error = exc
        batch.left -= 1
        if not batch.left:
            with self._cond:
                self._cond.notify_all()

    def forget(self, batch: Batch, queue: FairQueue) -> None:
        """A caller stopped (Ctrl-C): its tasks not yet sent are dropped; those sent run to their end."""
        with self._cond:
            self._incoming[:] = [t for t in self._incoming if t.owner is not batch]
        queue.drop(batch)

    def abort(self, tasks: list[Task], error: Exception) -> None:
        """Tasks that will get no result (the pool was closed, or their caller stopped waiting):
        their callers' batches raise ``error`` (the driver's thread)."""
        for task in tasks:
            task.result = ("error", str(error), 0.0)
            batch = task.owner
            if batch is None:
                continue
            if batch.error is None:
                batch.error = error
            batch.left -= 1
            if not batch.left:
                with self._cond:
                    self._cond.notify_all()

    def take_all(self) -> list[Task]:
        """The tasks not yet taken into the pool's queue, taken out (the pool is closing)."""
        with self._cond:
            tasks, self._incoming = self._incoming, []
        return tasks

    def close(self, wait_s: float) -> bool:
        """Refuse new callers; a caller driving the pool is told to stop and waited for (at most
        ``wait_s``). False if already closed."""
        with self._cond:
            if self.closed:
                return False
            self.closed = True
            if self.driving:
                self.closing = True
                self._wake()
                if self._driver != threading.get_ident():  # (closed from a progress callback: no wait)
                    self._cond.wait_for(lambda: not self.driving, wait_s)
        return True

    def shut_down_once(self) -> bool:
        """True the first time only: whoever gets it stops the closed pool's workers."""
        with self._cond:
            first, self._shut = not self._shut, True
        return first

    def close_fds(self) -> None:
        os.close(self.wake_fd)
        os.close(self._wake_w)
