"""Comparing two registries by their fingerprint items (``name -> dist==version | sha256:...``)."""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Mapping
from typing import Any

__all__ = ["diff_items"]


def _kind(driver: str, worker: str) -> str:
    d, w = driver.removesuffix(" (broken)"), worker.removesuffix(" (broken)")
    if w != worker and d == driver:
        return "broken"
    if d.startswith("sha256:") and w.startswith("sha256:"):
        return "file_hash"
    if "==" in d and "==" in w and d.split("==", 1)[0] == w.split("==", 1)[0]:
        return "version"
    return "mismatched"


def diff_items(driver: Mapping[str, str], worker: Mapping[str, str],
               used: Iterable[str] | None = None, *, strict: bool = False) -> list[dict[str, Any]]:
    """The differences between the driver's and a worker's fingerprint items, sorted by reward.

    Each difference is ``{"reward", "kind", "driver", "worker", "fatal"}``; ``kind`` is ``missing``
    (only the driver has it), ``extra`` (only the worker), ``version`` (same distribution, other
    version), ``file_hash``, ``broken`` (fine in the driver, broken on the worker) or ``mismatched``.
    A difference is ``fatal`` when the config uses the reward or when ``strict`` is set; any other
    is a warning (a reward the run never calls may differ). An extra reward is never fatal.

    >>> diff_items({"a": "p==1"}, {"a": "p==2", "b": "q==1"}, ["a"])[0]["kind"]
    'version'
    """
    used_set = set(used or ())
    out: list[dict[str, Any]] = []
    for name in sorted(set(driver) | set(worker)):
        d, w = driver.get(name), worker.get(name)
        if d == w:
            continue
        if w is None:
            kind = "missing"
        elif d is None:
            kind = "extra"
        else:
            kind = _kind(d, w)
        fatal = kind != "extra" and (strict or name in used_set)
        out.append({"reward": name, "kind": kind, "driver": d, "worker": w, "fatal": fatal})
    return out


