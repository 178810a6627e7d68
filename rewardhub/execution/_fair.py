"""The process pool's queue of calls: one queue per caller, served in turn.

Callers sharing a pool (threads, a server's requests) each get their turn: the pool takes a chunk of
calls from one caller, then from the next, so a 2-row call waits for a chunk or two of a 300-row
call's, not for all of them.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from collections.abc import Iterator
from typing import Any

from ._task import Task

__all__ = ["FairQueue"]

_NONE = object()


class FairQueue:
    """Calls waiting for a worker, per caller (``Task.owner``), in the order the callers take turns.

    Reads like a deque of the current caller's calls followed by the others': ``queue[0]`` and
    :meth:`popleft` are the current caller's next call, :meth:`appendleft` puts a call back at the
    front of its caller's queue and makes that caller current (a call taken back from a worker goes
    first), and :meth:`take_chunk` passes the turn on.
    """

    def __init__(self) -> None:
        #: caller -> its calls; the first caller is the current one (dicts keep their order)
        self._by: dict[Any, collections.deque[Task]] = {}
        self._n = 0

    def __len__(self) -> int:
        return self._n

    def __bool__(self) -> bool:
        return self._n > 0

    def __iter__(self) -> Iterator[Task]:
        for q in self._by.values():
            yield from q

    def __getitem__(self, k: int) -> Task:
        if k != 0 or not self._n:
            raise IndexError("only the next call can be read")
        return next(iter(self._by.values()))[0]

    def popleft(self) -> Task:
        owner, q = next(iter(self._by.items()))
        task = q.popleft()
        if not q:
            del self._by[owner]
        self._n -= 1
        return task

    def appendleft(self, task: Task) -> None:
        self._n += 1
        first = next(iter(self._by), _NONE)
        if first is task.owner:
            self._by[first].appendleft(task)
            return
        q = self._by.pop(task.owner, None) or collections.deque()  # a caller's queue is never empty
        q.appendleft(task)
        self._by = {task.owner: q, **self._by}

    def extendleft(self, tasks: Iterable[Task]) -> None:
        for t in tasks:
            self.appendleft(t)

    def extend(self, tasks: Iterable[Task]) -> None:
        for t in tasks:
            q = self._by.get(t.owner)
            if q is None:
                q = self._by[t.owner] = collections.deque()
            q.append(t)
            self._n += 1

    def take_chunk(self, size: int) -> list[Task]:
        """The current caller's next calls, at most ``size``, of one reward with the same keywords
        (one message to a worker); then the turn passes on."""
        first = self.popleft()
        chunk = [first]
        while self._n and len(chunk) < size:
            t = self[0]
            if t.key != first.key or t.kwargs is not first.kwargs:
                break
            chunk.append(self.popleft())
        if len(self._by) > 1:  # the current caller has had its turn: it goes after the others
            owner = next(iter(self._by))
            self._by[owner] = self._by.pop(owner)
        return chunk

    def owners(self) -> list[Any]:
        return list(self._by)

    def drop(self, owner: Any) -> list[Task]:
        """Take out every call of ``owner``."""
        q = self._by.pop(owner, None)
        if q is None:
            return []
        self._n -= len(q)
        return list(q)

    def clear(self) -> None:
        self._by.clear()
        self._n = 0
