"""What a process-pool worker answers for each call, and how the pool reads it.

An answer is ``(call number, status, body, latency, ended, retire)``: it names the call it answers,
so that the pool checks it against the call it expects (no answer can go to another sample), and
the reward's value travels pickled on its own (``body``), unpickled by the pool only after the call
has left the worker's calls in flight (a value the pool cannot rebuild fails that call alone).
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable
from typing import Any

from ._outcome import error_text
from ._where import MARK

__all__ = ["answer", "read_answer", "result_of"]


# ---------------------------------------------------------------------------- worker side
def answer(j: int, call: Callable[[], Any], clock: Callable[[], float], start: float) -> tuple[Any, ...]:
    """Call number ``j``'s answer: ``(j, status, body, latency, ended, retire)``. The return value
    travels pickled on its own (``body``, bytes), so that the pool reads the answer, and so knows which
    call it answers, even when that value cannot be unpickled there. ``retire``: the call ran out of
    memory (the reward's ``memory_limit_mb``, or the machine's); what the reward keeps would fail the
    calls after it too, so this worker stops after answering and the pool replaces it."""
    try:
        raw = call()
    except BaseException as exc:  # noqa: BLE001 - a bad reward is data
        return (j, "error", _failure(exc), clock() - start, time.monotonic(), isinstance(exc, MemoryError))
    latency = clock() - start
    try:
        body = pickle.dumps(raw, protocol=pickle.HIGHEST_PROTOCOL)
    except BaseException as exc:  # noqa: BLE001 - an unpicklable return value
        return (j, "error", f"return value cannot be sent back: {_failure(exc)}", latency,
                time.monotonic(), isinstance(exc, MemoryError))
    return (j, "ok", body, latency, time.monotonic(), False)


def _failure(exc: BaseException) -> str:
    text = error_text(exc)
    if isinstance(exc, MemoryError):  # the note belongs to the message, before the reward's frames
        message, mark, frames = text.partition(MARK)
        text = f"{message} (out of memory: the reward worker is replaced by a fresh one){mark}{frames}"
    return text


# ---------------------------------------------------------------------------- parent side
def result_of(status: str, body: Any, latency: float) -> tuple[str, Any, float]:
    """A call's result from its answer: an ``ok`` answer's value is unpickled here, and one that
    cannot be (a class this process cannot import, a ``__reduce__`` that raises) is that call's error."""
    if status != "ok":
        return (status, body, latency)
    try:
        return ("ok", pickle.loads(body), latency)
    except (Exception, SystemExit) as exc:  # whatever rebuilding the reward's value raised
        return ("error", f"the reward's return value cannot be read in the scoring process: "
                         f"{type(exc).__name__}: {exc}", latency)


def read_answer(data: bytes) -> tuple[int, str, Any, float, float, bool] | None:
    """A worker's answer ``(call number, status, body, latency, ended, retire)`` from its message;
    ``None`` when the message is not one (a reward wrote to the worker's pipe itself)."""
    try:
        answer = pickle.loads(data)
    except (Exception, SystemExit):  # garbage: the caller replaces the worker
        return None
    if (type(answer) is not tuple or len(answer) != 6 or type(answer[0]) is not int
            or answer[1] not in ("ok", "error") or not isinstance(answer[3], float)
            or not isinstance(answer[4], float) or type(answer[5]) is not bool):
        return None
    return answer
