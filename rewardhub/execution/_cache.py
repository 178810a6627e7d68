"""The reward cache: an expensive reward (a judge, a sandbox, a reward model) runs once per distinct input.

A term with ``cache`` on keys each sample by the reward's identity as provenance gives it (distribution
and version, target, the sha256 of a file reward; a module of no distribution by its file's sha256), the
term's kwargs, and the sample fields the reward's signature reads (a trajectory's whole ``messages``
included: :func:`fields_read`). Samples of one batch with one key make
one call (a GRPO group's identical completions); a key scored before makes none: in memory for the
runner's life (the :data:`MEMORY_ENTRIES` latest), and across runs on disk in ``DIR/scores.sqlite`` when
the runner has a folder (``rewardhub score --cache DIR``). Another version or file hash is another key,
so an old entry is never hit (what the code hash cannot see: :mod:`._codehash`). Failures are not
stored: the next batch calls again. A cache file that fails warns and is left aside (:mod:`._cachedisk`).
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections import OrderedDict
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from typing import Any

from .._targets import file_sha256
from .._targets import sha256
from ..errors import UsageError
from ..types import RewardSpec
from ..types import sample_name
from ._cachedisk import Disk
from ._cachedisk import Stored
from ._calls import FIELDS
from ._calls import own
from ._columns import Column
from ._outcome import ERROR
from ._outcome import NOT_APPLICABLE
from ._outcome import OK
from ._outcome import TIMEOUT
from ._outcome import Outcome
from ._terms import Term

__all__ = ["CachePlan", "MEMORY_ENTRIES", "RewardCache", "cache_for", "reward_identity"]

#: how many scores the in-memory cache keeps (the least recently used go first)
MEMORY_ENTRIES = 65536
#: a sample field -> the parameters a reward reads it by, beyond its own name and plural
_READ_AS = {"response": ("solution_str", "solution_strs", "completions")}



def reward_identity(spec: RewardSpec) -> list[Any]:
    """What tells this reward's code from any other's: distribution and version (rewardhub's for a
    built-in), target, bound params, a sha256 (a file reward's, or for a module of no distribution its
    file's), and the sha256 of the source files that can change without a new version: the reward's
    own when it lies outside the installed trees (a file, an editable install) and its local imports
    (:mod:`._codehash`). Computed once per term per runner, not per sample."""
    from .._discovery import find_module_file
    from .._targets import file_module_name
    from ..registry import core_version
    from ._codehash import code_digest

    version = core_version() if spec.source == "builtin" and not spec.dist else spec.version
    digest = spec.sha256
    code = None
    if spec.source != "builtin" or spec.dist:
        module = spec.target.rpartition(":")[0]
        if spec.is_file_target:
            path: str | None = module
            module = file_module_name(module, spec.sha256)
        else:
            path = find_module_file(module)
        if path:
            code = code_digest(path, module)
            if digest is None and not spec.dist:
                digest = file_sha256(path)
    return [spec.dist, version, spec.target, digest, [list(p) for p in spec.params], code]


def fields_read(term: Term) -> tuple[str, ...]:
    """The sample fields ``term``'s reward reads, by its signature (all of them with ``**kwargs``).

    A trajectory's ``messages`` (tool calls and all) are read by a reward that takes them, by one with
    ``**kwargs`` and by a TRL reward (its completions are the messages' replies); a reward that takes
    ``messages`` reads a text sample's prompt and response as its chat, so those are read too."""
    inv = term.invoker
    if inv.var_kw or inv.adapter == "trl":
        return (*FIELDS, "messages")
    read = tuple(f for f in FIELDS if inv.names & {f, f + "s", *_READ_AS.get(f, ())})
    if inv.messages or "messages" in inv.names:
        read = (*dict.fromkeys((*read, "prompt", "response")), "messages")
    return read


def _plain(value: Any) -> Any:
    """A value JSON cannot write, as one it can (else ``TypeError``: that sample is not cached)."""
    if hasattr(value, "tolist"):  # numpy / pyarrow values from a parquet file
        return value.tolist()
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, bytes):
        return {"bytes": value.hex()}
    raise TypeError(type(value).__name__)


def _dump(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=_plain)


class RewardCache:
    """Scores by key (see the module's docstring); safe for concurrent callers (one lock)."""

    def __init__(self, folder: str | None = None, store: Any = None) -> None:
        self._memory: OrderedDict[str, Stored] = OrderedDict()
        #: what is kept beyond this process's memory: the cache file, or a store shaped as it (``get``,
        #: ``put``: a Ray pool's, :mod:`rewardhub.distributed._fleetcache`)
        self._disk = store if store is not None else Disk(folder) if folder else None
        self._prefix: dict[str, str | None] = {}  # term name -> the part of its keys all samples share
        self._lock = threading.Lock()

    def plan(self, term: Term, batch: Sequence[Mapping[str, Any]], idx: Sequence[int],
             col: Column) -> CachePlan:
        """Put in ``col`` the samples of ``idx`` whose key is stored (hits); the plan's ``run`` are those to
        call, one per distinct key; :meth:`CachePlan.finish` gives the others their result."""
        prefix = self._prefix_of(term)
        fields = fields_read(term)
        plan = CachePlan(self)
        keys: dict[int, str] = {}
        for i in idx:
            key = None if prefix is None else _key(prefix, batch[i], fields)
            if key is None:
                plan.run.append(i)  # an input the key cannot hold: called, never stored
            else:
                keys[i] = key
        with self._lock:
            found = self._lookup(list(dict.fromkeys(keys.values())))
        first: dict[str, int] = {}
        for i, key in keys.items():
            if key in found:
                value, extra = found[key]
                status = OK if value is not None else NOT_APPLICABLE
                col.put_outcome(i, Outcome(value, status, own(extra), cache_hit=True))
            elif key in first:
                plan.copies.setdefault(first[key], []).append(i)
            else:
                first[key] = i
                plan.keys[i] = key
                plan.run.append(i)
        plan.run.sort()
        return plan

    def _prefix_of(self, term: Term) -> str | None:
        if term.name not in self._prefix:
            inv = term.invoker
            ident = reward_identity(term.spec)
            try:
                self._prefix[term.name] = _dump([ident, inv.kind, inv.adapter, term.kwargs])
            except (TypeError, ValueError):  # kwargs JSON cannot write: the term is called every time
                self._prefix[term.name] = None
        return self._prefix[term.name]

    def _lookup(self, keys: list[str]) -> dict[str, Stored]:
        mem = self._memory
        found = {k: mem[k] for k in keys if k in mem}
        for k in found:
            mem.move_to_end(k)
        rest = [k for k in keys if k not in found]
        if rest and self._disk is not None:
            from_disk = self._disk.get(rest)
            for k, v in from_disk.items():
                self._remember(k, v)
            found.update(from_disk)
        return found

    def _remember(self, key: str, stored: Stored) -> None:
        self._memory[key] = stored
        if len(self._memory) > MEMORY_ENTRIES:
            self._memory.popitem(last=False)

    def store(self, items: Sequence[tuple[str, Stored]]) -> None:
        with self._lock:
            for key, stored in items:
                self._remember(key, stored)
            if self._disk is not None and items:
                rows = []
                for key, stored in items:
                    with contextlib.suppress(TypeError, ValueError):  # extras JSON cannot write: not on disk
                        rows.append((key, json.dumps(stored, allow_nan=False)))
                self._disk.put(rows)


def _key(prefix: str, sample: Mapping[str, Any], fields: Sequence[str]) -> str | None:
    try:
        blob = prefix + _dump([sample.get(f) for f in fields])
    except (TypeError, ValueError):
        return None
    return sha256(blob.encode()).hexdigest()


@dataclass
class CachePlan:
    """One term's cache work on one batch: ``run`` the samples to call, each with its ``keys`` entry (none:
    not stored); ``copies`` the other samples with the same input as one of them."""

    cache: RewardCache
    run: list[int] = field(default_factory=list)
    keys: dict[int, str] = field(default_factory=dict)
    copies: dict[int, list[int]] = field(default_factory=dict)

    def finish(self, col: Column) -> None:
        """After the calls: store what they gave (not failures), give each copy its sample's result (a hit:
        it made no call), and count each call a miss."""
        stored = []
        for i in self.run:
            col.cache.setdefault(i, False)  # a hit on a Ray worker's own cache stays a hit
            status = col.status.get(i, OK)
            if status not in (ERROR, TIMEOUT) and i in self.keys:
                stored.append((self.keys[i], (col.values[i], dict(col.extra.get(i, {})))))
            for j in self.copies.get(i, ()):
                error = col.errors.get(i)
                if error is not None:
                    error = f"{error} ({sample_name(col.label(j))} has the same input)"
                col.put_outcome(j, Outcome(col.values[i], status, own(col.extra.get(i, {})), error,
                                           where=col.where.get(i), cache_hit=True))
        self.cache.store(stored)


def cache_for(terms: Sequence[Term], folder: str | None, store: Any = None) -> RewardCache | None:
    """The cache of a runner's ``terms`` (``None`` when no term has ``cache`` on); ``store``: where it
    keeps its scores instead of ``folder``'s file (a Ray pool's store).

    :raises UsageError: a group reward with ``cache`` on (its score of a sample depends on the others).
    """
    on = [t for t in terms if t.policy.cache]
    for t in on:
        if t.invoker.kind == "group":
            raise UsageError(f"reward term {t.name!r} has cache on, but it is a group reward: its score of "
                             "one sample depends on its group's others\nset cache: false on the term")
    return RewardCache(folder, store) if on else None
