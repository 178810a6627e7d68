"""The samples each reward took longest on, kept across batches (``score --summary-json`` lists them)."""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from ..types import InputRow
from ._columns import Column

__all__ = ["SlowestSamples"]

#: how much of a sample's response a listing shows
SHOWN_CHARS = 80


class SlowestSamples:
    """The ``k`` slowest samples of each reward term: ``(seconds, index, data_source, response)``.

    :param k: how many per term.
    """

    def __init__(self, k: int = 10) -> None:
        self.k = k
        self._by_term: dict[str, list[tuple[float, int, Any, str]]] = {}  # a min-heap each

    def add(self, columns: Mapping[str, Column], samples: Sequence[Mapping[str, Any]], offset: int) -> None:
        """One batch's columns; ``samples[col.label(j)]`` is the sample of a column's row ``j`` (a label
        that is an :class:`~rewardhub.types.InputRow` counts from the run's first sample), and the
        batch's first sample is sample ``offset`` of the run."""
        for name, col in columns.items():
            heap = self._by_term.setdefault(name, [])
            for j, seconds in col.slowest(self.k):
                if len(heap) == self.k and seconds <= heap[0][0]:
                    break  # the rest are faster still
                i = col.label(j)
                if isinstance(i, InputRow):  # labelled by its place in the run: back to the batch's
                    i = int(i) - offset
                s = samples[i]
                response = s.get("response")
                text = response if isinstance(response, str) else repr(response)
                self._keep(heap, (seconds, offset + i, s.get("data_source"), text[:SHOWN_CHARS]))

    def merge(self, other: SlowestSamples, offset: int) -> None:
        """Take in ``other``'s samples (another batch's, numbered from 0), that batch's first sample being
        sample ``offset`` of the run."""
        for name, entries in other._by_term.items():
            heap = self._by_term.setdefault(name, [])
            for seconds, i, source, text in entries:
                self._keep(heap, (seconds, i + offset, source, text))

    def _keep(self, heap: list[tuple[float, int, Any, str]], entry: tuple[float, int, Any, str]) -> None:
        """``entry`` in ``heap`` if it is one of the ``k`` slowest."""
        if len(heap) < self.k:
            heapq.heappush(heap, entry)
        elif entry[0] > heap[0][0]:
            heapq.heapreplace(heap, entry)

    def as_json(self) -> dict[str, list[dict[str, Any]]]:
        """Term name -> its slowest samples, the slowest first."""
        return {name: [{"seconds": x, "index": i, "data_source": ds, "response": text}
                       for x, i, ds, text in sorted(heap, key=lambda e: (-e[0], e[1]))]
                for name, heap in self._by_term.items()}
