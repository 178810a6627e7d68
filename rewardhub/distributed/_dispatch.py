"""One batch on a pool's workers: its chunks sent, every call bounded in time, a worker that dies or
hangs restarted and its chunks re-scored.

A score call that does not answer within its bound (:func:`call_bound`) is a hung worker: a stopped
process, a partitioned node, a reward model stuck in a kernel. It is treated as a dead one: killed,
restarted, and its chunk sent again (counted in ``rescored_samples``; after ``max_attempts`` tries
the chunk's samples fail), with one line naming the worker and the rewards it was running.
"""

from __future__ import annotations

import time
from collections import Counter
from collections import deque
from collections.abc import Mapping
from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Any

from ._errors import RegistryMismatchError
from ._errors import WorkerFailedError
from ._ray import actor_errors
from ._ray import short_error
from ._slots import pick_slot

if TYPE_CHECKING:
    from ._group import WorkerGroup
    from ._slots import WorkerSlot

__all__ = ["CALL_SLACK_S", "call_bound", "dispatch", "outcomes_of"]

#: added to every derived bound: a call's trip through Ray, a process executor's start, retries' backoff
CALL_SLACK_S = 30.0


def call_bound(terms: Sequence[Mapping[str, Any]], rows: int, configured: float | None) -> float | None:
    """Seconds one score call of ``rows`` samples may take on a worker, or None (no bound).

    ``configured`` (``reward.workers.call_timeout_s``) when set; else derived from the terms the worker
    runs (their ``timeout_s`` and ``retries``, as its hello() reports them): even run one after another,
    each sample's call of each term ends within ``timeout_s * (1 + retries)``, so a chunk ends within
    the sum over its samples and terms, plus :data:`CALL_SLACK_S`. A term without a timeout leaves the
    call unbounded (unless ``configured``): it may run as long as it likes.
    """
    if configured:
        return float(configured)
    per_row = 0.0
    for t in terms:
        timeout = t.get("timeout_s")
        if not timeout:
            return None
        per_row += float(timeout) * (1 + int(t.get("retries") or 0))
    return CALL_SLACK_S + rows * per_row


def dispatch(pool: WorkerGroup, batch: list[dict[str, Any]], chunks: list[list[int]],
             terms: list[str] | None, idx: list[int]) -> dict[int, dict[str, Any]]:
    """Score ``chunks`` (positions in ``batch``) on ``pool``'s workers: chunk index -> its worker's answer,
    or ``{"failed": why}`` for a chunk that failed ``pool.max_attempts`` times."""
    ray = pool._ray
    todo = deque(range(len(chunks)))
    done: dict[int, dict[str, Any]] = {}
    fails: Counter[int] = Counter()
    pool.last_pids = set()
    pending: dict[Any, tuple[str, int, WorkerSlot, int]] = {
        s.starting: ("hello", -1, s, s.generation) for s in pool._slots if s.starting is not None}
    #: score ref -> when its worker counts as hung; hello ref -> when its worker is given up
    deadlines: dict[Any, float] = {ref: pool.start_deadline(slot) for ref, (_, _, slot, _) in pending.items()}
    figures = pool.figures
    queued = dict.fromkeys(todo, time.monotonic())  #: chunk -> since when it waits for a worker

    def lost(cid: int, why: str) -> None:
        """Chunk ``cid``'s call failed with its worker: sent again, or failed after max_attempts."""
        fails[cid] += 1
        if fails[cid] >= pool.max_attempts:
            done[cid] = {"failed": f"reward workers died {fails[cid]} times scoring it (last: {why})"}
        else:
            pool.rescored_samples += len(chunks[cid])
            figures.calls_redispatched += 1
            queued[cid] = time.monotonic()
            todo.appendleft(cid)

    def restarted(slot: WorkerSlot, why: str) -> None:
        """``slot``'s worker died: restarted (its hello awaited within the pool's replace timeout)."""
        pool._died(slot, why, pending)
        if slot.starting is not None:
            deadlines[slot.starting] = pool.start_deadline(slot)

    while todo or any(kind == "score" for kind, *_ in pending.values()):
        while todo:
            slot, pool._rr = pick_slot(pool._slots, pool.dispatch, pool.max_inflight, pool._rr)
            if slot is None:
                break
            cid = todo.popleft()
            figures.waited(time.monotonic() - queued[cid])
            rows = chunks[cid]
            ref = slot.actor.score.remote([batch[i] for i in rows], [idx[i] for i in rows], terms)
            slot.inflight += 1
            pending[ref] = ("score", cid, slot, slot.generation)
            bound = pool.call_bound(len(rows), terms)
            if bound is not None:
                deadlines[ref] = time.monotonic() + bound
        if not pending:
            raise WorkerFailedError(f"every reward worker of pool {pool.pool!r} is gone (after "
                                    f"{pool.restarts} restarts); {len(todo)} chunks left unscored\n"
                                    "see the Ray logs of the workers for why they died", pool=pool.pool)
        pool.saw_workers()
        wait = max(0.0, min(deadlines.values()) - time.monotonic()) if deadlines else None
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=wait)
        if not ready:
            for ref in [r for r, at in deadlines.items() if at <= time.monotonic()]:
                kind, cid, slot, gen = pending.pop(ref)
                deadlines.pop(ref)
                if kind == "hello":  # Ray has nowhere to place it: the pool goes on without it
                    if slot.starting is ref:
                        pool.unplaceable(slot)
                    continue
                why = pool.hung(slot, len(chunks[cid]), terms)
                if gen == slot.generation:
                    restarted(slot, why)
                lost(cid, why)
            continue
        for ref in ready:
            kind, cid, slot, gen = pending.pop(ref)
            deadlines.pop(ref, None)
            if kind == "hello":
                info = pool._hello(slot)
                if info.get("problems") and slot.info is info:
                    raise RegistryMismatchError(pool.pool, pool.setup.driver_fingerprint, [info])
                if not slot.alive:
                    restarted(slot, info["problems"][0]["detail"])
                continue
            if gen == slot.generation:
                slot.inflight -= 1
            try:
                res = ray.get(ref)
            except actor_errors() as exc:
                if gen == slot.generation:
                    restarted(slot, short_error(exc))
                lost(cid, short_error(exc))
                continue
            except Exception as exc:
                where = slot.info or {}
                raise WorkerFailedError(
                    f"reward worker {slot.index} of pool {pool.pool!r} on node {where.get('ip')} "
                    f"(node id {str(where.get('node_id'))[:12]}) failed: {exc}", pool=pool.pool,
                    node_id=where.get("node_id")) from exc
            if cid not in done and isinstance(res.get("pid"), int):
                pool.last_pids.add(res["pid"])
            done.setdefault(cid, res)
    return done


def outcomes_of(size: int, names: Sequence[str], chunks: Sequence[Sequence[int]],
                results: Sequence[Mapping[str, Any]], idx: Sequence[int]) -> dict[str, list[Any]]:
    """Each term's outcomes for a batch of ``size`` samples sent as ``chunks`` (places in the batch), from
    each chunk's answer: its outcomes, or ``failed`` (why its every sample failed, named by ``idx``)."""
    from ..execution import ERROR
    from ..execution import Outcome
    from ..types import sample_name

    out = {n: [Outcome(None)] * size for n in names}
    for chunk, res in zip(chunks, results):
        for n in names:
            if "failed" in res:
                for i in chunk:
                    why = f"reward {n!r} on {sample_name(idx[i])}: {res['failed']}"
                    out[n][i] = Outcome(None, ERROR, error=why)
                continue
            for i, wire in zip(chunk, res["outcomes"][n]):
                out[n][i] = Outcome.from_wire(wire)
    return out
