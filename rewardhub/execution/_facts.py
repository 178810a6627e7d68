"""What a :class:`~rewardhub.execution.Scorer` tells its callers about its terms, wherever they run.

A caller (``score``, ``serve``, the adapters, verl's managers, the trainer) needs a few facts of each term:
its name, the executor it runs on, its ``on_failure``, its weight, which sample fields its reward reads
and whether it needs a ground truth. A Runner knows them from its resolved terms, a remote server says
them in ``GET /info``; :class:`TermFacts` is that one shape, so no caller reads a Runner's internals.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from dataclasses import dataclass
from dataclasses import fields
from typing import Any

from ._terms import Term

__all__ = ["TermFacts", "effective_executor", "term_facts", "terms_provenance"]


@dataclass(frozen=True)
class TermFacts:
    """One term of a scorer, as its callers see it."""

    name: str
    #: the registered reward the term calls (``name`` unless the term has an alias)
    reward: str
    #: where it really runs (``inline`` | ``thread`` | ``process`` | ``ray``; ``remote`` on a server)
    executor: str
    on_failure: str
    weight: float = 1.0
    #: seconds a call may take (``None``: no limit of its own)
    timeout_s: float | None = None
    #: how it is called: one sample, a batch, a GRPO group (``group``: it must see whole groups), ...
    kind: str = "single"
    #: the sample fields the reward reads (its signature's; all of them with ``**kwargs``)
    reads: tuple[str, ...] = ()
    #: it names ``ground_truth`` as a parameter: a row without one is not given to it
    needs_ground_truth: bool = False
    #: how its parameters are read (``verl``: a verl-style function, given a ``None`` ground truth as verl
    #: passes it; ``trl``; ``native``)
    adapter: str = "native"
    #: where it applies, in words (``""``: every row)
    routes: str = ""
    #: one call per distinct input (the reward cache is on)
    cache: bool = False
    #: the file of a ``path:`` reward (``""`` otherwise, and for a term scored on a server)
    file: str = ""

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["reads"] = list(self.reads)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TermFacts:
        """A server's facts of a term (``GET /info``); an older server's lack some: their defaults."""
        known = {f.name for f in fields(cls)}
        got = {k: v for k, v in data.items() if k in known}
        got.setdefault("reward", data.get("name", ""))
        got.setdefault("executor", "remote")
        got.setdefault("on_failure", "nan")
        got["reads"] = tuple(got.get("reads") or ())
        got["file"] = ""  # a file on the server, not here
        return cls(**got)


def effective_executor(term: Term) -> str:
    """The executor a term really runs on: an ``inline`` sync reward with a ``timeout_s`` runs on
    the process executor (only killing its process can stop a sync call)."""
    ex = term.policy.executor
    if ex == "inline" and term.policy.timeout_s and not term.invoker.is_async:
        return "process"
    return str(ex)


def term_facts(term: Term) -> TermFacts:
    from ._cache import fields_read

    params = term.invoker.names
    return TermFacts(
        name=term.name, reward=term.spec.name, executor=effective_executor(term),
        on_failure=str(term.policy.on_failure), weight=term.weight, timeout_s=term.policy.timeout_s,
        reads=tuple(fields_read(term)), kind=term.invoker.kind,
        needs_ground_truth="ground_truth" in params or "ground_truths" in params,
        adapter=term.invoker.adapter, routes=term.routes, cache=bool(term.policy.cache),
        file=term.spec.target.rpartition(":")[0] if term.spec.is_file_target else "",
    )


def terms_provenance(terms: list[Term], ray_workers: list[dict[str, Any]],
                     pool_pids: list[int]) -> list[dict[str, Any]]:
    """Every term: where its reward came from (source, distribution and version, target, sha256 of a
    file reward), the executor it ran on, and the processes that ran it (what ``--summary-json`` and a
    server's ``GET /info`` say)."""
    from .._specs import reward_facts

    out = []
    for term in terms:
        spec, executor = term.spec, effective_executor(term)
        if executor == "ray":  # a Ray worker rebuilt the registry: its own values of the reward
            workers = [{**{k: w.get(k) for k in ("pool", "node", "pid", "registry_fingerprint")},
                        **(w.get("rewards") or {}).get(spec.name, {})}
                       for w in ray_workers if w.get("pool") == (term.pool or "reward")]
        else:
            workers = [{"pid": p} for p in pool_pids] if executor == "process" else [{"pid": os.getpid()}]
        out.append({"name": term.name, "reward": spec.name, **reward_facts(spec), "executor": executor,
                    "workers": workers})
    return out
