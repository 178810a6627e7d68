"""Data-parallel learning: ``trainer.num_learners`` learner processes train one batch together.

What it does is in the README ("More than one learner"): rank 0 is the learner the driver talks to,
starts the other ranks and is the rendezvous; each rank trains its run of whole GRPO groups with the
loss normalised by the whole batch's totals, so one bucketed ``all_reduce`` of the gradients gives the
one-process gradient whatever the ranks' token counts. Not ``DistributedDataParallel``: its hooks need
every rank to run the same number of synchronised backward passes, which ranks with unequal
micro-batch counts, an empty share or a skipped non-finite update do not. A rank that dies breaks the
group; Ray restarts rank 0, which starts new ranks, and the driver restores the learner from its
latest checkpoint (:meth:`rewardhub_trainer.loop.Run._restore`).
"""

from __future__ import annotations

import datetime
import os
import socket
import sys
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any
from typing import TypeVar

__all__ = ["COLLECTIVE_TIMEOUT_S", "Group", "lead", "rendezvous", "split_groups", "start_ranks"]

#: a collective that waits longer than this for a rank fails (and the group is restarted)
COLLECTIVE_TIMEOUT_S = 600.0
#: gradients are reduced in buckets of at most this many elements (bounded extra memory)
BUCKET_ELEMENTS = 1 << 25

T = TypeVar("T")


def split_groups(groups: Sequence[Sequence[T]], world: int) -> list[list[T]]:
    """The samples of each rank: contiguous runs of whole groups, the group counts as even as can be.

    Deterministic (rank ``r`` takes groups ``r*G//world`` to ``(r+1)*G//world``); a rank gets nothing
    when there are fewer groups than ranks.
    """
    n = len(groups)
    return [[s for g in groups[r * n // world:(r + 1) * n // world] for s in g] for r in range(world)]


def rendezvous() -> tuple[str, int]:
    """This node's address (as Ray knows it) and a free TCP port on it: where the ranks meet."""
    addr = "127.0.0.1"
    try:
        import ray

        if ray.is_initialized():
            addr = ray.util.get_node_ip_address()
    except Exception:  # noqa: BLE001 - outside Ray: this machine
        pass
    with socket.socket() as sock:
        sock.bind((addr, 0))
        return addr, int(sock.getsockname()[1])


class Group:
    """This process's place in the learners' process group, and the collectives the learner needs."""

    def __init__(self, addr: str, port: int, rank: int, world: int, device: str = "cpu",
                 timeout_s: float = COLLECTIVE_TIMEOUT_S) -> None:
        import torch
        import torch.distributed as dist

        self.rank, self.world = rank, world
        self.backend = "nccl" if device == "cuda" else "gloo"
        self.device = torch.device(device)
        if device == "cuda":
            torch.cuda.set_device(0)  # Ray shows each rank only its own GPU
        dist.init_process_group(self.backend, init_method=f"tcp://{addr}:{port}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=timeout_s))

    def sum(self, values: Sequence[float]) -> list[float]:
        """The element-wise sum of ``values`` over the ranks (float64)."""
        import torch
        import torch.distributed as dist

        t = torch.tensor(list(values), dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return [float(v) for v in t.tolist()]

    def all_true(self, flag: bool) -> bool:
        return self.sum([0.0 if flag else 1.0])[0] == 0.0

    def reduce_gradients(self, params: Sequence[Any]) -> None:
        """Replace each parameter's gradient by its sum over the ranks (a rank without one adds zeros).

        A parameter no rank has a gradient for keeps none (the optimizer leaves it alone, as it does in
        one process).
        """
        import torch
        import torch.distributed as dist
        from torch._utils import _flatten_dense_tensors
        from torch._utils import _unflatten_dense_tensors

        params = [p for p in params if p.requires_grad]
        have = self.sum([float(p.grad is not None) for p in params])
        params = [p for p, n in zip(params, have) if n > 0]
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        bucket: list[Any] = []
        size = 0
        for i, p in enumerate(params):
            bucket.append(p.grad)
            size += p.grad.numel()
            if size >= BUCKET_ELEMENTS or i == len(params) - 1:
                flat = _flatten_dense_tensors(bucket)
                dist.all_reduce(flat)
                for grad, reduced in zip(bucket, _unflatten_dense_tensors(flat, bucket)):
                    grad.copy_(reduced)
                bucket, size = [], 0

    def broadcast(self, module: Any) -> None:
        """Every parameter and buffer of ``module`` from rank 0."""
        import torch
        import torch.distributed as dist

        with torch.no_grad():
            for tensor in module.state_dict().values():
                dist.broadcast(tensor, src=0)


def start_ranks(actor_cls: type, options: Sequence[Mapping[str, Any]], addr: str, port: int,
                *args: Any, **kwargs: Any) -> list[Any]:
    """Start ranks ``1..len(options)`` as Ray actors (owned by this process: they die with it)."""
    import ray

    remote: Any = ray.remote(actor_cls)
    world = len(options) + 1
    return [remote.options(**dict(opts), max_restarts=0, max_task_retries=0).remote(
        *args, **kwargs, rank=(addr, port, r + 1, world)) for r, opts in enumerate(options)]


def _restart(why: str) -> None:
    """End this process (rank 0) so that Ray restarts it with a new group; the driver then restores it."""
    print(f"ERROR: learner group broken: {why}; rank 0 exits to be restarted with new ranks", file=sys.stderr,
          flush=True)
    os._exit(1)


def lead(own: Callable[[], T], refs: Sequence[Any], timeout_s: float = COLLECTIVE_TIMEOUT_S) -> T:
    """Run rank 0's part (in a thread) while the other ranks run theirs (``refs``, one per rank from 1).

    A rank that dies breaks the group at once (rank 0 would otherwise wait in a collective for it):
    this process ends (:func:`_restart`), as it does when a rank is still not done ``timeout_s``
    after rank 0's part ended. An error a rank raised is raised here at once, as ``learner rank N:
    <its error>`` (the driver stops the run naming it), not rank 0's collective timeout that follows it;
    an error of rank 0's own part is raised once every rank is done.
    """
    import threading
    import time

    import ray
    from ray.exceptions import ActorUnavailableError
    from ray.exceptions import RayActorError

    from .faults import cause

    outs: list[T] = []  #: rank 0's result, once its part returned
    failures: list[BaseException] = []  #: or what it raised

    def run() -> None:
        try:
            outs.append(own())
        except BaseException as exc:  # noqa: BLE001 - raised below, unless a rank's death caused it
            failures.append(exc)

    thread = threading.Thread(target=run, name="learner-rank-0", daemon=True)
    thread.start()
    rank_of = {ref: r for r, ref in enumerate(refs, start=1)}
    pending, errors = list(refs), []
    deadline = None
    while pending or thread.is_alive():
        if pending:
            done, pending = ray.wait(pending, num_returns=len(pending), timeout=0.5)
            for ref in done:
                try:
                    ray.get(ref)
                except (RayActorError, ActorUnavailableError):
                    _restart(f"learner rank {rank_of[ref]} died")
                except Exception as exc:  # noqa: BLE001 - its own error: the group is broken, say it now
                    errors.append(RuntimeError(f"learner rank {rank_of[ref]}: {cause(exc)}"))
            if errors:
                break  # rank 0's part waits in a collective for the rank that failed: never for its timeout
        else:
            thread.join(timeout=0.5)
        if not thread.is_alive() and pending:
            deadline = deadline or time.monotonic() + timeout_s
            if time.monotonic() > deadline:
                _restart(f"learner rank {rank_of[pending[0]]} did not finish within {timeout_s:g}s of rank 0")
    if errors:
        raise errors[0]
    if failures:
        raise failures[0]
    return outs[0]
