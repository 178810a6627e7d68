"""Actor faults: pools of handles that heal, and the rollouters' weights, checked on every sync.

A rollouter only generates with the weights the driver last sent it: every ``set_weights`` is
acknowledged and checked, and every ``generate`` names the weights it expects (a rollouter that
holds others, because Ray restarted it with the base weights or its last load failed, answers with
the version it holds instead of generating). A rollouter that dies is restarted by Ray, or
re-created, and is sent the current weights before anything else; one whose weight load raises is
replaced by a fresh process. A fault that keeps coming back on one rollouter stops the run with
:class:`RunAborted` (``rollouter N: weight sync failed: ...``) instead of retrying for ever.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from rewardhub.errors import RewardhubError

from .rollouts import PromptBatch
from .rollouts import Rollout

__all__ = ["ActorGroup", "LearnerLost", "Rollouters", "RunAborted", "actor_fault", "cause", "hang",
           "kill_actors", "raised_in_actor", "wait_alive"]

from ray.exceptions import ActorUnavailableError  # noqa: E402 - loaded only once the config is valid
from ray.exceptions import RayActorError  # noqa: E402
from ray.exceptions import RayTaskError  # noqa: E402

ACTOR_ERRORS = (RayActorError, ActorUnavailableError)
SYNC_TIMEOUT_S = 300.0  #: a weight sync not acknowledged by then counts as failed


class RunAborted(RewardhubError):
    """A fault that kept coming back: the run stops with one line naming the process and the cause."""


class LearnerLost(Exception):
    """The learner's process died; the driver restarts it from the latest checkpoint."""


def cause(exc: BaseException) -> str:
    """The first line of the error an actor raised (not Ray's wrapper and traceback)."""
    inner = exc.cause if isinstance(exc, RayTaskError) and exc.cause is not None else exc
    text = str(inner).strip().splitlines()
    first = text[0] if text else type(inner).__name__
    return first if ":" in first or not isinstance(inner, Exception) else f"{type(inner).__name__}: {first}"


def actor_fault(exc: BaseException, deadline: float) -> str | None:
    """Why a call on an actor failed with its actor: it did not answer within ``deadline``
    (``GetTimeoutError``: hung) or it died; None when the call itself raised, or another error."""
    from ray.exceptions import GetTimeoutError

    if isinstance(exc, GetTimeoutError):
        return f"not answered within {deadline:g}s (trainer.call_timeout_s)"
    if isinstance(exc, ACTOR_ERRORS):
        return f"died ({cause(exc)})"
    return None


def raised_in_actor(exc: BaseException) -> bool:
    """Did the actor's method raise ``exc`` (Ray's wrapper of its error)? (The parts that never import
    Ray ask here.)"""
    return isinstance(exc, RayTaskError)


def wait_alive(handle: Any, what: str, timeout: float = 300.0) -> None:
    """Wait while Ray restarts the actor behind ``handle`` (its calls fail fast until it is back).

    Returns when it answers, or when it is dead for good (the next call fails, and is handled).
    """
    import time

    import ray

    deadline = time.monotonic() + timeout
    while True:
        try:
            ray.get(handle.info.remote(), timeout=min(60.0, timeout))
            return
        except ActorUnavailableError:
            pass
        except Exception:  # noqa: BLE001 - dead for good, no answer in time, its constructor raised, ...:
            return  # the next call fails, and is handled
        if time.monotonic() > deadline:
            raise RunAborted(f"{what}: not back {timeout:.0f}s after a restart; see the Ray logs of its node")
        time.sleep(0.2)


def hang(handle: Any, what: str, why: str) -> None:
    """An actor that is alive but does not answer (``why``): killed so that Ray restarts it, as after a
    death."""
    import sys

    import ray

    print(
        f"WARNING: {what}: {why}; restarting it as a dead one (trainer.call_timeout_s)",
        file=sys.stderr,
        flush=True,
    )
    with contextlib.suppress(Exception):  # gone already: its calls fail, and are handled
        ray.kill(handle, no_restart=False)


def kill_actors(handles: list[Any]) -> None:
    """Kill the actors of ``handles`` for good (those gone already too)."""
    import ray

    for h in handles:
        with contextlib.suppress(Exception):  # gone already
            ray.kill(h, no_restart=True)


class ActorGroup:
    """The actor handles of one role (rollouters, learners, the reward client), one per slot; a handle whose
    actor died with no Ray restarts left is re-created (``epochs`` count incarnations)."""

    def __init__(self, role: str, factory: Callable[[int], Any], size: int, max_restarts: int) -> None:
        self.role = role
        self.factory = factory  #: slot index -> a new handle (its placement bundle is the slot's)
        self.handles = [factory(i) for i in range(size)]
        self.failures = [0] * size
        self.epochs = [0] * size
        self.max_restarts = max_restarts
        self.restarts = 0
        self.recreated = 0

    def failed(self, i: int) -> Any:
        """Record that handle ``i``'s process died; return the handle to resubmit to."""
        self.failures[i] += 1
        if self.failures[i] > self.max_restarts:  # no Ray restart left: a new actor
            self.failures[i] = 0
            return self.replace(i)
        self.restarts += 1
        self.epochs[i] += 1
        return self.handles[i]

    def replace(self, i: int) -> Any:
        """Replace handle ``i`` (alive but broken) by a fresh process."""
        kill_actors([self.handles[i]])
        self.handles[i] = self.factory(i)
        self.epochs[i] += 1
        self.restarts += 1
        self.recreated += 1
        return self.handles[i]


class Rollouters:
    """The rollouters' weights and generate calls.

    :param check_weights: raises :class:`LearnerLost` or :class:`RunAborted` when the weights being
        sent are themselves the fault (the learner died, or its weights are not finite).
    :param retries: failures in a row on one rollouter (failed syncs, deaths, lost weights) before
        the run stops.
    """

    def __init__(self, pool: ActorGroup, *, retries: int, check_weights: Callable[[], None],
                 deadline_s: float = 0.0) -> None:
        """``deadline_s``: a generate call not answered by then is hung: :meth:`overdue` kills its
        rollouter, which is then restarted as a dead one is (0: no deadline)."""
        self.pool = pool
        self.deadline_s = deadline_s
        self.started: dict[Any, float] = {}  #: generate ref -> when it was sent
        self.hung = 0  #: rollouters killed because a generate call passed the deadline
        size = len(pool.handles)
        self.sent = [0] * size  #: the weights tag each rollouter was last sent (0: the base weights)
        self.in_row = [0] * size  #: failures in a row on each rollouter
        self.acks: dict[Any, tuple[int, int, int]] = {}  #: set_weights ref -> (rollouter, epoch, call number)
        # : generate ref -> (rollouter, batch, epoch, call number)
        self.gen: dict[Any, tuple[int, PromptBatch, int, int]] = {}
        self._calls = 0  #: calls sent to the rollouters so far (each actor runs its calls in that order)
        self.weights: tuple[Any, int] | None = None  #: the current weights (ref, tag); None: the base ones
        self.retries = retries
        self.check_weights = check_weights
        self.lost_calls = 0  #: calls lost with a dead rollouter (resubmitted)
        self.sync_failures = 0  #: acknowledgements that came back failed

    # -- weights -----------------------------------------------------------------------------
    def sync(self, ref: Any, tag: int) -> None:
        """Send every rollouter the weights ``ref`` (tagged ``tag``); acknowledgements are checked later."""
        self.weights = (ref, tag)
        for i in range(len(self.pool.handles)):
            self._send(i)

    def _send(self, i: int) -> None:
        if self.weights is None:
            self.sent[i] = 0  # a fresh process holds the base weights, tag 0
            return
        ref, tag = self.weights
        ack = self.pool.handles[i].set_weights.remote(ref, tag)
        self._calls += 1
        self.acks[ack] = (i, self.pool.epochs[i], self._calls)
        self.sent[i] = tag

    def settle(self, i: int | None = None, *, before: int | None = None) -> None:
        """Wait for the acknowledgements of rollouter ``i`` (of all when None) and check them; with
        ``before``, only those of calls sent before call number ``before``."""
        import ray

        while True:
            mine = [a for a, (j, _, n) in self.acks.items()
                    if (i is None or j == i) and (before is None or n < before)]
            if not mine:
                return
            done, stuck = ray.wait(mine, num_returns=len(mine), timeout=SYNC_TIMEOUT_S)
            for ack in done:
                self.acked(ack)
            for ack in stuck:  # alive but not answering (e.g. a stopped process): a fresh one
                j, epoch, _n = self.acks.pop(ack)
                if epoch == self.pool.epochs[j]:
                    self.sync_failures += 1
                    self._failed(j, TimeoutError(f"no acknowledgement within {SYNC_TIMEOUT_S:g}s"),
                                 died=False, what="weight sync failed")

    def acked(self, ack: Any) -> None:
        """Handle one finished ``set_weights``: a failure restarts or replaces that rollouter."""
        import ray

        i, epoch, _n = self.acks.pop(ack)
        try:
            ray.get(ack)
        except Exception as exc:  # noqa: BLE001 - every failure is handled or ends the run
            if epoch != self.pool.epochs[i]:
                return  # that process was replaced already; its successor was sent the weights
            self.check_weights()  # the weights themselves may be the fault (the learner died)
            self.sync_failures += 1
            self._failed(i, exc, died=isinstance(exc, ACTOR_ERRORS), what="weight sync failed")
            return
        if epoch == self.pool.epochs[i]:
            self.in_row[i] = 0

    def _failed(self, i: int, exc: BaseException | None, *, died: bool, what: str) -> None:
        if not isinstance(exc, ActorUnavailableError):  # (that one: still restarting from a death seen)
            self.in_row[i] += 1
        if self.in_row[i] > self.retries:
            detail = cause(exc) if exc is not None else "it keeps losing its weights"
            raise RunAborted(f"rollouter {i}: {what}: {detail} ({self.in_row[i]} times in a row; "
                             "check that every node has the same model folder and enough memory)")
        if died:
            self.lost_calls += 1
            self.pool.failed(i)  # Ray restarts it (or it is re-created) with the base weights
            wait_alive(self.pool.handles[i], f"rollouter {i}")
        else:
            self.pool.replace(i)  # alive, but its weights are broken: a fresh process
        self._send(i)

    # -- generation --------------------------------------------------------------------------
    def submit(self, i: int, batch: PromptBatch) -> Any:
        import time

        ref = self.pool.handles[i].generate.remote(batch, self.sent[i])
        self._calls += 1
        self.gen[ref] = (i, batch, self.pool.epochs[i], self._calls)
        self.started[ref] = time.monotonic()
        return ref

    def overdue(self) -> None:
        """Kill each rollouter whose generate call has passed the deadline (Ray restarts it; the call
        then fails as a dead rollouter's does, and :meth:`done` resubmits its batch)."""
        import time

        if not self.deadline_s:
            return
        now = time.monotonic()
        for ref, t0 in list(self.started.items()):
            if now - t0 > self.deadline_s and ref in self.gen:
                i = self.gen[ref][0]
                del self.started[ref]  # killed once
                self.hung += 1
                hang(
                    self.pool.handles[i],
                    f"rollouter {i}",
                    f"generate not answered within {self.deadline_s:g}s",
                )

    def busy(self) -> set[int]:
        return {i for i, _, _, _ in self.gen.values()}

    def done(self, ref: Any) -> Rollout | None:
        """The rollout of a finished generate call, or None when it was resubmitted."""
        import ray

        i, batch, epoch, number = self.gen.pop(ref)
        self.started.pop(ref, None)
        # the weights sent before this call were loaded (or not) before it ran; those sent after it
        # (queued behind it on the actor) are checked as they come
        self.settle(i, before=number)
        try:
            out: Rollout | int = ray.get(ref)  # an int: the weights version it holds instead
        except ACTOR_ERRORS as exc:
            self.settle(i)  # the weights queued behind it died with it: a failed sync, seen first
            if epoch == self.pool.epochs[i]:
                self._failed(i, exc, died=True, what="died")
            self.submit(i, batch)
            return None
        except RayTaskError as exc:
            raise RunAborted(f"rollouter {i}: generate failed: {cause(exc)}") from None
        if isinstance(out, int):  # it holds other weights (restarted by Ray while idle)
            if epoch == self.pool.epochs[i]:
                self.pool.restarts += 1
                self.pool.epochs[i] += 1
                self.in_row[i] += 1
                if self.in_row[i] > self.retries:
                    raise RunAborted(f"rollouter {i}: weight sync failed: it holds version {out}, "
                                     f"not {self.sent[i]}, after {self.in_row[i]} syncs in a row")
                self._send(i)
            self.submit(i, batch)
            return None
        if epoch == self.pool.epochs[i]:
            self.in_row[i] = 0
        return out

    def collect(self) -> list[Rollout]:
        """Wait for every generate call in flight; the rollouts that came back (acks are dropped)."""
        import ray

        out: list[Rollout] = []
        for ref in list(self.gen):
            try:
                rollout = ray.get(ref)
            except Exception:  # noqa: BLE001 - never produced: not generated
                continue
            if not isinstance(rollout, int):
                out.append(rollout)
        self.gen.clear()
        self.started.clear()
        self.acks.clear()
        return out
