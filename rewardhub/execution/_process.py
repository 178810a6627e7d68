"""A process pool whose hung or crashed workers are killed and replaced: the pool heals.

Work goes to the workers in chunks (one message carries many calls, so a worker never waits for
the parent between calls), and each call's result comes back on its own as soon as it is done, so
timeouts stay per call: the parent knows which call a worker is running and since when.

Callers in several threads may run batches at once and share the workers: each caller's calls wait
in a queue of their own and the callers take turns, chunk by chunk (see :mod:`._fair`); a caller
that stops waiting has its calls not yet started dropped (see :meth:`ProcessPool.run`).
"""

from __future__ import annotations

import math
import multiprocessing
import multiprocessing.connection
import select
import sys
import time
from collections.abc import Callable
from typing import Any

from ..errors import RewardhubError
from ._answers import result_of
from ._callers import Batch
from ._callers import Callers
from ._callers import Cancel
from ._fair import FairQueue
from ._task import Task
from ._task import WorkerPayload
from ._watch import Watch
from ._worker import Worker
from ._worker import tell_to_stop

__all__ = ["ProcessPool"]

#: a chunk aims at about this much work, so a worker is told what to do ~20 times a second at most
_CHUNK_TARGET_S = 0.05
_CHUNK_MAX = 256
#: a second chunk is queued behind the running one only when its message is this small (a large
#: message could block the parent on a full pipe while that worker hangs)
_PIPELINE_MAX_BYTES = 48 * 1024
_RETAKE_S = 0.05  #: a stuck worker whose queued calls could not be taken back: looked at again after


class ProcessPool:
    """``size`` worker processes; each runs one call at a time, from chunks of calls sent to it.

    A call past its ``timeout_s`` gets its worker's whole process group killed; a worker that
    dies (SIGKILL, segfault, ``os._exit``) fails only its current call. Either way the calls
    queued behind it go back to the queue, and a new worker takes its place: the pool heals.

    :ivar kills: workers killed for a timeout. :ivar crashes: workers that died by themselves.
    :ivar spares_started: extra workers started because others were stuck.
    """

    def __init__(self, size: int) -> None:
        self._ctx = multiprocessing.get_context("fork" if sys.platform.startswith("linux") else "spawn")
        self.size = max(1, int(size))
        self._workers: list[Worker] = []
        self._payloads: dict[str, WorkerPayload] = {}
        self.kills = self.crashes = 0
        #: a call running longer than ``stuck_after_s`` (0.2; or 30 times the reward's mean call time,
        #: if less; at least 25 ms) is "stuck": the calls queued behind it go to other workers, and
        #: if it waits rather than computes, a spare worker takes its place in the rotation (at
        #: most ``max_spares``) until it finishes or its timeout kills it
        self.watch = Watch(0.2)
        self.spares_started = 0
        self.taken_back = 0  #: calls taken back from stuck workers and run elsewhere
        self.strays = 0  #: answers dropped: their call had been answered already
        #: (a hung call holds its sleeping worker until its timeout: with 1 % of calls hanging for
        #: 1 s at 10,000 calls/s, 100 at a time; with too few spares the pool stalls until the first
        #: timeouts free some); the cap is also what bounds the spares' memory
        self.max_spares = max(128, 16 * self.size)
        self._dying: list[Worker] = []  # killed, not yet reaped
        #: every worker's connection and sentinel, registered once (``connection.wait`` would build
        #: and fill a selector on every turn of the loop, i.e. for every answer)
        self._poll = select.poll()
        self._fds: dict[int, Worker] = {}
        self._queue = FairQueue()  # the calls waiting for a worker, per caller (see run)
        self._callers = Callers()
        self._poll.register(self._callers.wake_fd, select.POLLIN)

    @property
    def stuck_after_s(self) -> float:
        return self.watch.stuck_after_s

    @stuck_after_s.setter
    def stuck_after_s(self, value: float) -> None:
        self.watch.stuck_after_s = value

    def register(self, key: str, payload: WorkerPayload) -> None:
        self._payloads[key] = payload

    def _room(self, key: str) -> bool:
        """Whether one more call of ``key`` may start: its ``max_concurrency`` is not reached."""
        limit = self._payloads[key].max_concurrency
        if not limit:
            return True
        return sum(1 for w in self._workers if any(t.key == key for t in w.inflight)) < limit

    def _grow(self, queue: FairQueue) -> None:
        """Workers start lazily: one more only when every worker is busy and the next call may start."""
        while (queue and len(self._workers) < self.size and all(w.inflight for w in self._workers)
               and self._room(queue[0].key)):
            self._add(self._new_worker())

    def _add(self, w: Worker) -> None:
        self._workers.append(w)
        for fd in (w.conn.fileno(), w.proc.sentinel):
            if fd is not None:
                self._poll.register(fd, select.POLLIN)
                self._fds[fd] = w

    def _remove(self, w: Worker) -> None:
        self._workers.remove(w)
        for fd in [fd for fd, x in self._fds.items() if x is w]:
            self._poll.unregister(fd)
            del self._fds[fd]

    def _new_worker(self) -> Worker:
        self._reap(wait=False)  # the workers killed a moment ago, if gone by now
        return Worker.fork(self._ctx)

    def pids(self) -> list[int]:
        return [w.proc.pid for w in self._workers if w.proc.pid is not None]

    # ---- dispatch ----------------------------------------------------------------------
    def _take(self, queue: FairQueue) -> list[Task]:
        """The next chunk of calls: guided, big chunks while much is left, small ones at the end so
        that the workers finish together."""
        est = self.watch.mean(queue[0].key)
        cap = 2 if est is None else max(1, min(_CHUNK_MAX, int(_CHUNK_TARGET_S / max(est, 1e-6))))
        return queue.take_chunk(max(1, min(cap, math.ceil(len(queue) / (4 * self.size)))))

    def _finish(self, task: Task, result: tuple[str, Any, float], queue: FairQueue) -> None:
        task.attempts += 1
        if result[0] != "ok" and task.attempts <= task.retries:
            queue.appendleft(task)
            return
        task.result = result
        self._callers.finished(task)

    def _replace(self, w: Worker) -> None:
        self._remove(w)
        w.kill(wait=False)
        self._dying.append(w)
        if len(self._workers) < self.size:
            self._add(self._new_worker())

    def _reap(self, wait: bool = True) -> None:
        """Wait for the killed workers (dead by now, or within moments: SIGKILL cannot be caught);
        with ``wait=False`` only for those already gone."""
        left = []
        for w in self._dying:
            if wait or w.proc.exitcode is not None:
                w.proc.join(5 if wait else 0.01)
            else:
                left.append(w)
        self._dying[:] = left

    def run(self, tasks: list[Task], done: Callable[[Task], None] = lambda t: None,
            cancel: Cancel | None = None) -> list[Task]:
        """Run every task to a result (``ok``, ``error`` or ``timeout``); returns them in order.

        Callers in several threads share the workers, not wait for each other (see :mod:`._callers`);
        ``done`` is called per finished task in the thread driving the pool, and what it raises is
        raised here once this call's tasks are done. Once ``cancel`` is set, the calls not yet sent
        to a worker are dropped and this raises."""
        if not tasks:
            return tasks
        batch = self._callers.join(tasks, done, cancel)
        if batch.left:
            try:
                self._drive(batch)
            except BaseException:
                self._callers.forget(batch, self._queue)
                raise
            finally:
                self._trim()
                self._reap()
                self._callers.hand_on()
                if self._callers.closing:  # closed while this caller drove
                    self._shut_down()
        if batch.error is not None:
            raise batch.error
        return tasks

    def _drive(self, batch: Batch) -> None:
        """The pool's loop, for every caller's calls, until ``batch``'s are done."""
        queue = self._queue
        while batch.left:
            if self._callers.closing:
                self._abort(queue)
                return
            if self._callers.cancels:
                self._callers.drop_cancelled(queue)
                continue
            if self._callers.waiting:
                self._callers.take(queue)
            now = time.monotonic()
            self._dispatch(queue, now)
            busy = [w for w in self._workers if w.inflight]
            if not busy:
                continue
            for w in busy:
                if queue or len(w.inflight) > 1:
                    self.watch.look(w, now)
                if len(w.inflight) > 1 and self.watch.stuck(w, now):
                    back = w.take_back()
                    self.taken_back += len(back)
                    queue.extendleft(reversed(back))
            busy = [w for w in busy if w.inflight]
            if not busy:
                continue
            if (queue and self._room(queue[0].key) and len(self._workers) < self.size + self.max_spares
                    and self.watch.want_spare(self._workers, self.size, now)):  # a spare would help
                self._add(self._new_worker())
                self.spares_started += 1
                continue
            deadlines = [w.started + w.inflight[0].timeout_s for w in busy if w.inflight[0].timeout_s]
            deadlines += [now + _RETAKE_S for w in busy if len(w.inflight) > 1 and self.watch.stuck(w, now)]
            watched = [w for w in busy if (queue or len(w.inflight) > 1) and not self.watch.stuck(w, now)]
            deadlines += [w.started + self.watch.stuck_after(w) for w in watched]
            deadlines += [w.next_look for w in watched if w.idle is None]
            wait_s = max(0.0, min(deadlines) - now) if deadlines else None
            events = self._poll.poll(None if wait_s is None else math.ceil(wait_s * 1000))
            ready = {self._fds[fd] for fd, _ in events if fd in self._fds}
            if len(ready) < len(events):  # another caller's calls came
                self._callers.take(queue)
            for w in busy:
                self._collect(w, w in ready, queue)
            for w in ready.difference(busy):  # an idle worker that died (or a spare that got no work yet)
                if w in self._workers:
                    self._collect(w, True, queue)
            now = time.monotonic()
            for w in list(self._workers):
                task = w.task
                if task is not None and task.timeout_s and now - w.started >= task.timeout_s:
                    self._collect(w, True, queue)  # an answer that came in just now wins
                    if w not in self._workers or w.task is not task:
                        continue
                    self.kills += 1
                    queue.extendleft(reversed(w.unstarted()))
                    self._finish(task, ("timeout", f"timed out after {task.timeout_s:g}s; worker killed",
                                        now - w.started), queue)
                    self._replace(w)

    def _abort(self, queue: FairQueue) -> None:
        """The pool is being closed: every call not done fails its caller's batch with an error
        that says so, and the busy workers are killed (the closing thread reaps them)."""
        error = RewardhubError("the reward runner was closed while this batch was being scored")
        tasks = list(queue) + self._callers.take_all()
        queue.clear()
        for w in [w for w in self._workers if w.inflight]:
            tasks.extend(w.inflight)
            w.unstarted()
            self._remove(w)
            w.kill(wait=False)
            self._dying.append(w)
        self._callers.abort(tasks, error)

    def _dispatch(self, queue: FairQueue, now: float) -> None:
        self._grow(queue)
        for w in sorted(self._workers, key=lambda w: bool(w.inflight)):  # idle (or starting) ones first
            if not queue or not self._room(queue[0].key):
                return
            if w.inflight and (w.chunk_of[0] != w.chunk_of[-1] or self.watch.stuck(w, now)):
                continue  # one chunk waiting behind the running one is enough
            chunk = self._take(queue)
            try:
                data = w.encode(chunk, self._payloads)
            except Exception as exc:  # a sample that cannot be pickled fails alone
                self._unsendable(chunk, exc, queue)
                continue
            if w.inflight and len(data) > _PIPELINE_MAX_BYTES:
                queue.extendleft(reversed(chunk))
                continue
            try:
                w.send(chunk, data, now)
            except (BrokenPipeError, OSError):  # died while idle
                queue.extendleft(reversed(chunk))
                if not w.inflight:
                    self.crashes += 1
                    self._replace(w)

    def _unsendable(self, chunk: list[Task], exc: Exception, queue: FairQueue) -> None:
        if len(chunk) > 1:  # find the culprit: the others go back one by one
            for t in reversed(chunk):
                queue.appendleft(t)
            queue[0].kwargs = dict(queue[0].kwargs)  # a chunk of its own
            return
        task = chunk[0]
        task.attempts = task.retries  # no retry can help
        error = f"sample cannot be sent to a worker process: {type(exc).__name__}: {exc}"
        self._finish(task, ("error", error, 0.0), queue)

    def _collect(self, w: Worker, ready: bool, queue: FairQueue) -> None:
        """Take every answer the worker has sent; handle its death.

        Each answer names the call it answers (its number); the call leaves the worker's calls in
        flight before its value is unpickled, so a value the parent cannot rebuild fails that call
        alone. An answer to a call already answered is dropped; an answer out of turn, or one that
        cannot be read at all, means the worker cannot be trusted: it is replaced."""
        if not ready:
            return
        dead = False
        while True:
            kind, answer = w.read()
            if kind == "none":
                break
            if kind == "dead":
                dead = True
                break
            if kind == "stray":
                self.strays += 1  # a second answer to a call answered before
                continue
            if kind == "bad":
                self._lost(w, queue, f"reward worker process sent {answer}; worker replaced")
                return
            _, status, body, latency, ended, retire = answer
            task = w.pop()
            w.started = max(w.started, ended)
            w.probe, w.idle, w.next_look = None, None, 0.0
            self.watch.record(task.key, latency)
            self._finish(task, result_of(status, body, latency), queue)
            if retire:  # out of memory: it has stopped; its calls not started go to the others
                queue.extendleft(reversed(w.unstarted(running=False)))
                self._replace(w)
                return
        if not dead and w.proc.is_alive():
            return
        if not w.inflight:
            if w.proc.sentinel is not None and not w.proc.is_alive():
                self._replace(w)
            return
        w.proc.join(1)
        code = w.proc.exitcode
        how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        self._lost(w, queue, f"reward worker process died ({how})")

    def _lost(self, w: Worker, queue: FairQueue, why: str) -> None:
        """The worker is dead or cannot be trusted: its running call fails with ``why``, the calls it
        has not started go back to the queue, and a new worker takes its place."""
        self.crashes += 1
        task = w.inflight[0]
        queue.extendleft(reversed(w.unstarted()))
        self._finish(task, ("error", why, time.monotonic() - w.started), queue)
        self._replace(w)

    def _trim(self) -> None:
        """Retire idle spare workers so the pool is back to ``size``."""
        while len(self._workers) > self.size:
            idle = next((w for w in self._workers if not w.inflight), None)
            if idle is None:
                return
            self._remove(idle)
            idle.stop()

    def close(self) -> None:
        """Stop the workers; callers scoring at this moment get an error that says so."""
        if not self._callers.close(wait_s=10.0):
            return
        if self._callers.driving:  # the driver has not stopped yet: it shuts the pool down as it stops
            return
        self._shut_down()

    def _shut_down(self) -> None:
        if not self._callers.shut_down_once():
            return
        for w in self._workers:  # ask all first, so they exit in parallel
            tell_to_stop(w.conn)
        for w in self._workers:
            if w.inflight:  # a run stopped midway (Ctrl-C): a busy worker would not hear the request
                w.kill(wait=False)
                self._dying.append(w)
            else:
                w.stop()
        for w in list(self._workers):
            self._remove(w)
        self._reap()
        self._poll.unregister(self._callers.wake_fd)
        self._callers.close_fds()

