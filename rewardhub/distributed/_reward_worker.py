"""The reward worker: a plain class that Ray runs as an actor (and doctor as a one-off probe).

It receives a :class:`WorkerSetup` (plain data), never a callable: it writes the shipped reward
files, builds the registry from the same sources as the driver, compares fingerprints, and then
scores with a :class:`~rewardhub.execution.Runner` of its own, each term under its non-Ray policy.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from .._specs import reward_facts
from ..config.schema import RewardConfig
from ..execution import term_facts
from ._files import place_files
from ._fingerprint import diff_items
from ._ray import process_location
from ._setup import WorkerSetup
from ._setup import check_items
from ._setup import used_targets

__all__ = ["RewardWorker", "probe"]


class RewardWorker:
    """Scores samples with the registry it built itself.

    Start-up never raises: what went wrong is in :meth:`hello`'s ``problems``, so the driver can
    report every worker's problems at once.

    :param setup: from :func:`~rewardhub.distributed._setup.prepare_setup` in the driver.
    :param index: the worker's slot in its pool (``-1`` for a doctor probe).
    :param load: also import every term's reward (and build the runner).
    """

    def __init__(self, setup: WorkerSetup, index: int = 0, *, load: bool = True) -> None:
        t0 = time.perf_counter()
        self.setup = setup
        self.index = index
        self.problems: list[dict[str, Any]] = []
        self.notes: list[dict[str, Any]] = []
        self.files: dict[str, str] = {}
        self.fingerprint: str | None = None
        self.rewards: dict[str, dict[str, Any]] = {}
        self.terms: list[Any] = []
        self.terms_info: list[dict[str, Any]] = []
        self.aggregation = "weighted_sum"
        self._runners: dict[tuple[str, ...] | None, Any] = {}
        self._store: Any = None
        self.scored = 0
        try:
            self._start(load)
        except Exception as exc:  # noqa: BLE001 - reported by hello()
            self.problems.append({"reward": None, "kind": "error", "fatal": True,
                                  "detail": f"{type(exc).__name__}: {exc}"})
        self.start_s = time.perf_counter() - t0

    def _start(self, load: bool) -> None:
        from ..registry import build_registry

        cfg, problems, self.files = place_files(self.setup.files, self.setup.reward_cfg)
        self.problems.extend(problems)
        bad = {p["reward"] for p in problems}
        registry = build_registry(cfg)
        self.fingerprint = registry.fingerprint()
        items = check_items(registry, cfg)
        # this worker's own values of each used reward (provenance: summary.json, score --summary-json)
        self.rewards = {name: reward_facts(registry.get_reward(name) if registry.has_reward(name) else None,
                                           items.get(name)) for name in dict.fromkeys(self.setup.used)}
        for d in diff_items(self.setup.driver_items, items, self.setup.used, strict=self.setup.strict):
            if d["reward"] in bad:
                continue
            if d["kind"] == "broken":
                d["detail"] = registry.get_reward(d["reward"]).error
            (self.problems if d["fatal"] else self.notes).append(d)
        # same distribution and version, yet another module:attr (e.g. an edited editable install)
        flagged = bad | {p.get("reward") for p in self.problems}
        mine = used_targets(registry, self.setup.driver_targets)
        for name, target in self.setup.driver_targets.items():
            if name not in flagged and name in mine and mine[name] != target:
                self.problems.append(
                    {"reward": name, "kind": "target", "driver": target, "worker": mine[name], "fatal": True}
                )
        self.aggregation = cfg.aggregation
        if load and not self.problems:
            self._resolve(registry, cfg)

    def _resolve(self, registry: Any, cfg: RewardConfig) -> None:
        import dataclasses

        from ..config.frozen import thaw
        from ..execution import resolve_term
        from ..execution import sandbox_settings

        sandbox = sandbox_settings(cfg)
        rm = thaw(dataclasses.asdict(cfg.reward_model))
        for i, term_cfg in enumerate(cfg.rewards):
            try:
                term = resolve_term(registry, term_cfg, i, sandbox=sandbox, reward_model=rm)
            except Exception as exc:  # noqa: BLE001 - an import error on this node
                name = term_cfg.alias or term_cfg.name or term_cfg.function
                self.problems.append({"reward": name, "kind": "broken", "fatal": True,
                                      "detail": f"{type(exc).__name__}: {exc}"})
                continue
            pol = term.policy
            self.terms_info.append({**term_facts(term).as_dict(), "executor": pol.executor,
                                    "kind": term.invoker.kind, "timeout_s": pol.timeout_s,
                                    "retries": pol.retries, "cache": pol.cache})
            # here the reward runs in this process (or its own process pool); the driver applies
            # on_failure, so a failure comes back as data, never as a raised error
            local = "inline" if pol.executor == "ray" else pol.executor
            term.policy = pol.merged(executor=local, on_failure="nan")
            self.terms.append(term)

    # ---- remote methods ------------------------------------------------------------------
    def hello(self) -> dict[str, Any]:
        """Who and where this worker is, its fingerprint, and every problem found at start-up."""
        from ..registry import core_version

        return {"role": "reward_worker", "pool": self.setup.pool, "index": self.index, **process_location(),
                "fingerprint": self.fingerprint, "rewards": self.rewards, "problems": self.problems,
                "notes": self.notes,
                "terms": self.terms_info, "files": self.files, "start_s": self.start_s,
                "python": sys.version.split()[0], "rewardhub": core_version(),
                "ok": not self.problems}

    def ping(self) -> int:
        return os.getpid()

    def score(self, samples: Sequence[Mapping[str, Any]], indices: Sequence[int] | None = None,
              terms: Sequence[str] | None = None) -> dict[str, Any]:
        """Score ``samples`` with every term (or those named); outcomes in wire form, per term.

        ``indices`` are the samples' positions in the driver's batch: the outcomes carry them, and
        error messages name them.
        """
        if self.problems:
            from ._errors import RegistryMismatchError

            raise RegistryMismatchError(self.setup.pool, self.setup.driver_fingerprint, [self.hello()])
        res = self._runner(terms).score(list(samples), indices=indices)
        out = {name: [o.to_wire() for o in outs] for name, outs in res.outcomes.items()}
        self.scored += len(samples)
        return {"outcomes": out, "pid": os.getpid()}

    def _runner(self, names: Sequence[str] | None) -> Any:
        from ..execution import Runner

        key = tuple(names) if names else None
        runner = self._runners.get(key)
        if runner is None:
            chosen = self.terms if key is None else [t for t in self.terms if t.name in key]
            unknown = sorted(set(key or ()) - {t.name for t in chosen})
            if unknown:
                from ..errors import UsageError

                raise UsageError(f"reward worker has no term {', '.join(map(repr, unknown))}")
            if self._store is None and self.setup.cache_store is not None:  # the pool's, for every runner
                from ._fleetcache import FleetStore

                self._store = FleetStore(self.setup.cache_store)
            runner = self._runners[key] = Runner(chosen, self.aggregation, cache_store=self._store)
        return runner

    def close(self) -> None:
        for runner in self._runners.values():
            runner.close()
        self._runners.clear()


def probe(setup: WorkerSetup) -> dict[str, Any]:
    """Doctor's check on one node: start a worker, report, stop it."""
    worker = RewardWorker(setup, index=-1)
    try:
        return worker.hello()
    finally:
        worker.close()
