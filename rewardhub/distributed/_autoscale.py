"""AutoscaleGroup: the reward workers of one pool as a Ray Serve deployment that grows and shrinks with
its queue (``reward.workers.autoscale``).

Serve does the scaling: :func:`serve_autoscaling` maps the four keys onto its ``autoscaling_config``.
A worker is a replica (:class:`~rewardhub.distributed._replica.RewardReplica`): it proves its registry in
its constructor, and one that fails is never used (its problems are reported). A call is one chunk of
samples; Serve queues the chunks no replica is free for, and that queue is what it scales on. A chunk
whose replica dies (or does not answer within the call bound) is sent again, at most ``max_attempts``
times, and its answer is taken once: every sample gets exactly one result.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import math
import os
import threading
import time
import uuid
from typing import Any

from ..execution import Outcome
from ._chunks import make_chunks
from ._dispatch import outcomes_of
from ._errors import RegistryMismatchError
from ._errors import WorkerFailedError
from ._group import PoolGroup
from ._ray import actor_errors
from ._ray import short_error
from ._replica import RewardReplica
from ._replica import clear_refusals
from ._replica import read_refusals
from ._settings import PoolSettings
from ._setup import WorkerSetup
from ._slots import WorkerSlot
from ._slots import slot_facts
from ._startup import check_placeable
from ._startup import warn_unused_differences

__all__ = ["AutoscaleGroup", "serve_autoscaling"]

log = logging.getLogger("rewardhub.distributed")

#: the deployment's name inside its application
DEPLOYMENT = "reward_worker"
#: seconds between two looks at the replica count while a batch runs
_LOOK_S = 0.5
#: how often a Serve handle reports its queue to the autoscaler (Serve's default: 10 s)
_PUSH_ENV = "RAY_SERVE_HANDLE_AUTOSCALING_METRIC_PUSH_INTERVAL_S"


def serve_autoscaling(scale: Any, per_replica: int) -> dict[str, Any]:
    """Serve's ``autoscaling_config`` for ``reward.workers.autoscale`` (``scale``), each replica running
    ``per_replica`` calls (one scoring, the rest queued at it, as a fixed pool's ``max_inflight``).

    - ``min_workers`` -> ``min_replicas`` and ``initial_replicas``; ``max_workers`` -> ``max_replicas``;
    - a call waits when more calls are ongoing than the replicas take: ``target_ongoing_requests`` is
      ``per_replica``, so Serve wants ``ceil(calls / per_replica)`` replicas;
    - ``target_wait_s`` -> ``upscale_delay_s``: replicas are added once that want has lasted so long;
    - ``idle_s`` -> ``downscale_delay_s``: replicas are removed once fewer were wanted that long (no work:
      down to ``min_replicas``);
    - ``look_back_period_s`` (the window Serve averages the calls over) is ``target_wait_s``, at least
      1 s and at most Serve's default of 30 s, so a burst counts within the wait it is allowed; the
      replicas and handles report every half of it (``metrics_interval_s``).
    """
    wait = float(scale.target_wait_s)
    look = min(30.0, max(1.0, wait))
    return {"min_replicas": int(scale.min_workers), "initial_replicas": int(scale.min_workers),
            "max_replicas": int(scale.max_workers), "target_ongoing_requests": float(per_replica),
            "upscale_delay_s": wait, "downscale_delay_s": float(scale.idle_s),
            "look_back_period_s": look, "metrics_interval_s": look / 2}


class AutoscaleGroup(PoolGroup):
    """The workers of one pool on Ray Serve, between ``min_workers`` and ``max_workers`` replicas (the
    same face as :class:`~rewardhub.distributed._group.WorkerGroup` to the pool)."""

    def __init__(self, setup: WorkerSetup, settings: PoolSettings) -> None:
        s, w = settings, setup.reward_cfg.workers
        from ..config.schema import AutoscaleConfig
        from ..config.schema import validate_reward

        scale: Any = s.autoscale if s.autoscale is not None else w.autoscale
        if not isinstance(scale, AutoscaleConfig):  # PoolSettings(autoscale={...}): checked as the config is
            scale = validate_reward({"workers": {"autoscale": dict(scale)}}).workers.autoscale
        self.scale: AutoscaleConfig = scale
        self.min_workers, self.max_workers = scale.min_workers, int(scale.max_workers or 1)
        #: replica id -> its hello(), as each replica's first answer brought it
        self.replicas: dict[str, dict[str, Any]] = {}
        self._dead: set[str] = set()  #: actors (replicas) that died under a call
        self._refused: set[str] = set()  #: refused replicas already noted
        self.app = f"rewardhub-{setup.pool}-{uuid.uuid4().hex[:8]}"
        self._loop: asyncio.AbstractEventLoop | None = None
        self._serve: Any = None
        super().__init__(setup, settings, self.min_workers)
        try:
            check_placeable(self._ray, self._needs(), self.pool)
            self._start(setup, s.start_timeout_s)
        except BaseException:
            self.close()
            raise
        info = self.replicas[next(iter(self.replicas))]
        warn_unused_differences([info], self.pool)
        self._take_terms(info.get("terms", []))

    # ---- start-up ----------------------------------------------------------------------
    def _start(self, setup: WorkerSetup, timeout_s: float) -> None:
        # the handle (this process) tells Serve its queue every 10 s by default: a burst would wait that
        # long before Serve hears of it; as often as the window Serve averages over (read when Serve is
        # first imported here; an environment that sets it wins)
        os.environ.setdefault(_PUSH_ENV, str(serve_autoscaling(self.scale, 1)["metrics_interval_s"]))
        from ray import serve

        self._serve = serve
        serve.start(proxy_location="Disabled")
        deployment: Any = serve.deployment(
            RewardReplica, name=DEPLOYMENT, max_ongoing_requests=self.max_inflight,
            ray_actor_options=self._actor_options(),
            autoscaling_config=serve_autoscaling(self.scale, self.max_inflight))
        # serve.run waits for min_workers replicas: bounded (a cluster without room for them never places
        # them), by the pool's start timeout
        starting = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="rewardhub-serve")
        run = starting.submit(serve.run, deployment.bind(setup, self.app), name=self.app, route_prefix=None)
        starting.shutdown(wait=False)
        try:
            self._handle = run.result(timeout=timeout_s)
        except concurrent.futures.TimeoutError:
            raise WorkerFailedError(
                f"the autoscaling reward pool {self.pool!r} did not start {self.min_workers} replicas within "
                f"{timeout_s:g}s (each needs {self._needs()}; is the cluster big enough for min_workers?)",
                pool=self.pool) from None
        except Exception as exc:  # a replica refused its registry, or could not start
            refused = read_refusals(self.app)
            if refused:
                raise RegistryMismatchError(self.pool, setup.driver_fingerprint, refused) from None
            raise WorkerFailedError(f"the autoscaling reward pool {self.pool!r} did not start: "
                                    f"{short_error(exc)}", pool=self.pool) from exc
        hello = self._handle.hello.remote().result(timeout_s=timeout_s)
        self.replicas[hello["replica"]] = hello
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"rewardhub-{self.pool}",
                                        daemon=True)
        self._thread.start()

    # ---- scoring -----------------------------------------------------------------------
    def score_outcomes(self, batch: list[Any], names: list[str], idx: list[int],
                       all_terms: bool = False) -> dict[str, list[Outcome]]:
        """Raw outcomes of this group's terms ``names`` (``all_terms``: every one of them) per sample."""
        terms = None if all_terms else list(names)
        groups = any(n in self._whole for n in names)
        # a chunk per call, small enough that max_workers replicas all get some (a caller's chunk_size,
        # e.g. the trainer's batch / num_workers, is cut down to that)
        most = max(1, math.ceil(len(batch) / self.max_workers))
        size = min(self.chunk_size, most) if self.chunk_size else max(1, math.ceil(most / 4))
        chunks = make_chunks(batch, size, groups)
        self.last_pids = set()
        assert self._loop is not None
        fut = asyncio.run_coroutine_threadsafe(self._all(batch, chunks, terms, idx), self._loop)
        while True:
            try:
                results = fut.result(timeout=_LOOK_S)
                break
            except concurrent.futures.TimeoutError:
                self.saw_workers()
        self.saw_workers()
        return outcomes_of(len(batch), names, chunks, results, idx)

    async def _all(self, batch: list[Any], chunks: list[list[int]], terms: list[str] | None,
                   idx: list[int]) -> list[dict[str, Any]]:
        return list(await asyncio.gather(*(self._one(batch, rows, terms, idx) for rows in chunks)))

    async def _one(self, batch: list[Any], rows: list[int], terms: list[str] | None,
                   idx: list[int]) -> dict[str, Any]:
        """One chunk's answer: sent until a replica answers it, at most ``max_attempts`` times."""
        samples, where = [batch[i] for i in rows], [idx[i] for i in rows]
        bound = self.call_bound(len(rows), terms)
        why = ""
        for attempt in range(self.max_attempts):
            if attempt:
                self.rescored_samples += len(rows)
                self.figures.calls_redispatched += 1
            sent = time.time()
            response = self._handle.score.remote(samples, where, terms)
            try:
                res: dict[str, Any] = await (asyncio.wait_for(response, bound) if bound else response)
            except TimeoutError:
                response.cancel()  # type: ignore[no-untyped-call]
                why = f"no answer within {bound:g}s (reward.workers.call_timeout_s)"
                self.note(f"a chunk of {len(rows)} samples on pool {self.pool!r}: {why}; sent again")
                continue
            except actor_errors() as exc:
                why = short_error(exc)
                actor = str(getattr(exc, "actor_id", "") or why)
                if actor not in self._dead:
                    self._dead.add(actor)
                    self.figures.replaced += 1
                    self.restarts += 1
                    log.warning("a reward replica of pool %r died (%s); Serve replaces it, its calls are "
                                "sent again", self.pool, why)
                continue
            except Exception as exc:
                raise WorkerFailedError(f"a reward replica of pool {self.pool!r} failed: {exc}",
                                        pool=self.pool) from exc
            self.figures.waited(float(res.get("start", sent)) - sent)
            if isinstance(res.get("pid"), int):
                self.last_pids.add(res["pid"])
            if res.get("hello"):
                self.replicas.setdefault(str(res["replica"]), res["hello"])
            return res
        return {"failed": f"reward replicas failed it {self.max_attempts} times (last: {why})"}

    # ---- figures and notes -------------------------------------------------------------
    def replica_states(self) -> dict[str, int]:
        """Serve's replicas of this pool by state (``RUNNING``, ``STARTING``, ``STOPPING``, ...)."""
        try:
            status = self._serve.status().applications[self.app].deployments[DEPLOYMENT]
        except Exception:  # noqa: BLE001 - Serve gone (closing)
            return {"RUNNING": self.figures.workers_now}
        return {str(k): int(v) for k, v in status.replica_states.items()}

    def replica_count(self) -> int:
        """The replicas Serve runs now (RUNNING)."""
        return self.replica_states().get("RUNNING", 0)

    def saw_workers(self) -> None:
        """Count the running replicas into the figures; note a replica that refused its registry."""
        self.figures.saw_workers(self.replica_count())
        try:
            refused = read_refusals(self.app)
        except Exception:  # noqa: BLE001
            return
        for info in refused:
            if info.get("replica") not in self._refused:
                self._refused.add(str(info.get("replica")))
                err = RegistryMismatchError(self.pool, self.setup.driver_fingerprint, [info])
                self.note(f"a new reward replica of pool {self.pool!r} was not used: {err}")

    def pool_figures(self) -> dict[str, object]:
        """This pool's figures, as ``--summary-json`` writes them (``workers``: Serve's replicas)."""
        self.saw_workers()
        return {**self.figures.as_dict(), "autoscale": {"min_workers": self.min_workers,
                                                        "max_workers": self.max_workers}}

    def workers_info(self) -> list[dict[str, Any]]:
        """One dict per replica that answered so far (its hello(), as a fixed pool's worker's); ``alive``:
        None (Serve keeps that)."""
        return [{**slot_facts(WorkerSlot(n, info=i), self.pool), "replica": tag, "alive": None}
                for n, (tag, i) in enumerate(self.replicas.items())]

    def close(self) -> None:
        """Delete the Serve application (and stop Serve and Ray when this group started Ray)."""
        if self._serve is not None:
            with contextlib.suppress(Exception):  # Ray already down
                self._serve.delete(self.app)
                clear_refusals(self.app)
            if self._started_ray:
                with contextlib.suppress(Exception):
                    self._serve.shutdown()
            self._serve = None
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            if not self._thread.is_alive():
                self._loop.close()
            self._loop = None
        self._stop_ray()
