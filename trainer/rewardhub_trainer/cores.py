"""Cores lent between the actors that share a node while one of them waits (README: "Threads").

The actors of one run on one node share a board: one byte per actor in a file in ``/dev/shm`` (or the
temporary folder), mapped into each process. An actor marks itself busy for a call that computes
(:meth:`CoreShare.busy`); hooks on the model's decoder layers (forward, and backward into each)
recompute its threads from the board, so a change is seen within one layer's work. A slot nobody has
written (an actor on another node, or still loading) is neither lent nor given threads. Off wherever
it cannot help (:func:`off_because`, checked before any actor starts; :func:`share_for` in actors
not on the CPU).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import tempfile
import time
from collections.abc import Iterator
from typing import Any

__all__ = [
    "BUSY",
    "IDLE",
    "CoreShare",
    "board_path",
    "busy",
    "off_because",
    "remove_board",
    "share_for",
    "threads_for",
]

BUSY, IDLE = 1, 2  #: a slot's byte; 0: not written yet (or not on this node)


def board_path(token: str) -> str:
    """The board of the run ``token`` on this node (RAM-backed where ``/dev/shm`` exists)."""
    folder = (
        "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()
    )
    return os.path.join(folder, f"rewardhub-cores-{token}")


def threads_for(states: bytes, slot: int, base: int) -> int:
    """The threads of the actor in ``slot``: its ``base``, plus an equal part of the idle actors'.

    Each idle slot lends ``base`` threads, shared among the busy slots (the remainder goes to the
    lowest ones). An actor that is not busy keeps ``base``.
    """
    if states[slot] != BUSY:
        return base
    busy = [i for i, s in enumerate(states) if s == BUSY]
    lent = base * sum(1 for s in states if s == IDLE)
    order = busy.index(slot)
    return base + lent // len(busy) + (1 if order < lent % len(busy) else 0)


class CoreShare:
    """One actor's place on its node's board: ``slot`` of ``slots``, ``base`` threads of its own;
    without ``borrow`` it only lends (marks itself busy and idle) and keeps ``base`` threads."""

    def __init__(self, token: str, slot: int, slots: int, base: int, borrow: bool = True) -> None:
        if not 0 <= slot < slots or base < 1:
            raise ValueError(f"core share: slot {slot} of {slots}, base {base} threads")
        self.slot, self.slots, self.base, self.borrow = slot, slots, base, borrow
        self.path = board_path(token)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if os.fstat(fd).st_size < slots:
                os.ftruncate(fd, slots)  # zeros: every other slot is "not written" until its actor marks it
            self._board = mmap.mmap(fd, slots)
        finally:
            os.close(fd)
        self.threads = base
        self._since = time.perf_counter()
        self._thread_s = 0.0  #: thread-seconds since the last busy() began
        self._board[slot] = IDLE

    def check(self, *_args: Any) -> None:
        """Set this process's torch threads to what the board gives it now (a hook: arguments ignored)."""
        want = threads_for(self._board[: self.slots], self.slot, self.base) if self.borrow else self.base
        if want != self.threads:
            import torch

            now = time.perf_counter()
            self._thread_s += (now - self._since) * self.threads
            self._since = now
            torch.set_num_threads(want)
            self.threads = want

    @contextlib.contextmanager
    def busy(self) -> Iterator[dict[str, float]]:
        """Mark the actor busy for the block; yields a dict that gets ``threads``, the block's
        time-weighted mean of this actor's threads, as the block ends."""
        out: dict[str, float] = {}
        self._board[self.slot] = BUSY
        self.check()
        t0 = self._since = time.perf_counter()
        self._thread_s = 0.0
        try:
            yield out
        finally:
            self._board[self.slot] = IDLE
            now = time.perf_counter()
            total = self._thread_s + (now - self._since) * self.threads
            out["threads"] = total / (now - t0) if now > t0 else float(self.threads)
            # what the actor does between calls (a weight copy) stays on its own
            if self.threads != self.base:
                import torch

                torch.set_num_threads(self.base)
                self.threads = self.base

    def attach(self, model: Any) -> int:
        """Hook :meth:`check` onto each decoder layer of ``model`` (forward, and backward into it);
        returns the number of layers hooked (0: none found, the threads change only at ``busy``)."""
        layers = [m for m in model.modules() if type(m).__name__.endswith("DecoderLayer")]

        def after(_module: Any, _inputs: Any, output: Any) -> None:
            hidden = output[0] if isinstance(output, tuple) else output
            if getattr(hidden, "requires_grad", False):
                hidden.register_hook(self._on_grad)

        for layer in layers:
            layer.register_forward_pre_hook(self.check)
            layer.register_forward_hook(after)
        return len(layers)

    def _on_grad(self, grad: Any) -> None:
        self.check()

    def close(self) -> None:
        with contextlib.suppress(ValueError, OSError):
            self._board[self.slot] = 0
            self._board.close()


#: ``hidden_size * intermediate_size`` from which a model's layers gain from a second thread: SmolLM2-135M
#: (576 x 1536) trains and generates faster with one lent; the tests' tiny model (64 x 128) is slower
#: on two threads than on one (fully_async on tiny.yaml: 240 samples/s with threads lent, 350 without)
BORROW_MIN_SIZE = 1 << 19


def worth_borrowing(model: Any) -> bool:
    """Are ``model``'s decoder layers large enough for more threads to make them faster?"""
    cfg = getattr(model, "config", None)
    size = int(getattr(cfg, "hidden_size", 0) or 0) * int(getattr(cfg, "intermediate_size", 0) or 0)
    return size >= BORROW_MIN_SIZE


def off_because(*, mode: str, lend: str, torch_threads: int, num_learners: int, engine: str,
                gpus_asked: float, nodes: int) -> str | None:
    """Why a run's actors keep their own threads (None: they lend). Lending helps only CPU actors of
    one node sharing its cores: off outside ``fully_async``, with ``lend_idle_cores: never`` or set
    ``torch_threads``, several learners, the vLLM engine (its own threads), any GPU asked, several nodes."""
    for off, why in ((mode != "fully_async", "sync mode: the actors take turns on every core"),
                     (lend == "never", "trainer.lend_idle_cores=never"),
                     (torch_threads > 0, "trainer.torch_threads is set"),
                     (num_learners != 1, "several learner ranks"),
                     (engine != "transformers", f"the {engine} engine manages its own threads"),
                     (gpus_asked > 0, "GPU actors"),
                     (nodes > 1, f"{nodes} nodes")):
        if off:
            return why
    return None


def share_for(
    cores: tuple[str, int, int, str] | None, threads: int, device: str, model: Any
) -> CoreShare | None:
    """An actor's share (None: its threads stay as set). Only a CPU actor with a thread count of its
    own and a model lends; ``cores`` is (run token, slot, slots, ``trainer.lend_idle_cores``). It
    borrows too with ``always``, or with ``auto`` when :func:`worth_borrowing`."""
    if cores is None or threads < 1 or device != "cpu" or not hasattr(model, "modules"):
        return None
    token, slot, slots, mode = cores
    share = CoreShare(token, slot, slots, base=threads,
                      borrow=mode == "always" or (mode == "auto" and worth_borrowing(model)))
    if share.borrow:
        share.attach(model)
    return share


def busy(share: CoreShare | None) -> contextlib.AbstractContextManager[dict[str, float]]:
    """``share.busy()``, or a block that changes nothing (and reports no threads) without a share."""
    return share.busy() if share is not None else contextlib.nullcontext({})


def remove_board(token: str) -> None:
    """Remove this node's board of the run ``token`` (the driver, as the run ends)."""
    with contextlib.suppress(OSError):
        os.remove(board_path(token))
