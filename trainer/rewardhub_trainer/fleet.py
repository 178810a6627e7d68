"""The actors of a run: their start-up, calls that survive a dead actor, the weights sent to the
rollouters, the learner's restore, and their stop.

:class:`Fleet` is the run's part that owns every Ray handle. The placement group is made first, so a
cluster that lacks the resources the config asks for fails before any actor starts; every actor is
created through a :class:`rewardhub_trainer.faults.ActorGroup`, which restarts or re-creates it
when it dies. A rollouter that dies mid-call is restarted (or re-created), gets the current weights
again, and the same batch is resubmitted: a lost call never produced samples, so nothing is lost or
counted twice. A reward worker that dies is restarted by its
:class:`rewardhub.distributed.RewardWorkerPool`, which re-scores only the samples that worker had not
returned.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

from .config import RolloutConfig
from .devices import NO_GPU_ENV
from .devices import print_choices
from .faults import ACTOR_ERRORS
from .faults import ActorGroup
from .faults import LearnerLost
from .faults import Rollouters
from .faults import RunAborted
from .faults import cause
from .faults import kill_actors
from .faults import wait_alive
from .fleet_calls import FleetCalls
from .ledger import RestorePoint
from .placement import Placement
from .prepare import Prepared
from .rollouts import PromptBatch
from .rollouts import Rollout

__all__ = ["Fleet", "check_infos"]

#: seconds the reward clients get to close their pools at the end of a run, and when it stops on an
#: error or a signal (a client busy scoring answers only once its batch is in: then it is killed)
CLOSE_S, CLOSE_HURRIED_S = 60.0, 2.0

from ray.exceptions import RayTaskError  # noqa: E402 - loaded only once the config is valid


def starting(line: str) -> None:
    """One short line on stderr about what the run is doing while it starts (Ray, the actors, the
    models: a minute or more, silent otherwise)."""
    print(f"starting: {line}", file=sys.stderr, flush=True)


def check_infos(infos: list[dict[str, Any]]) -> None:
    """An actor that reports an error stops the run: a reward client's refused pool (its workers'
    rewards differ from the driver's, each named), or a learner rank that cannot run."""
    for w in infos:
        if w.get("error"):
            raise RunAborted(f"{w['role']} on {w['hostname']} (node id {str(w['node'])[:12]}, pid "
                             f"{w['pid']}): {w['error']}")


class Fleet(FleetCalls):
    """The run's learner (with its data-parallel ranks), rollouters, reward clients and message queue:
    :class:`rewardhub_trainer.protocols.ActorsProtocol` over Ray (what a schedule calls)."""

    placement: Placement
    rollouters: Rollouters
    learners: ActorGroup
    reward_client: ActorGroup
    queue: Any  #: the message queue's Ray actor handle

    def __init__(self, prep: Prepared) -> None:
        self.prep, self.cfg, self.t = prep, prep.cfg, prep.cfg.trainer
        self.workers: list[dict[str, Any]] = []  #: every actor's info, as of the last :meth:`infos`
        self.lost_calls = {"reward_client": 0}  #: calls lost with their actor (and sent again)
        self.weight_syncs = 0
        self.learner_restarts = 0  #: in the whole run (the summary)
        #: deaths since the learner last wrote a checkpoint after its restore (at most trainer.max_restarts)
        self.learner_in_row = 0
        self._restored_to: RestorePoint | None = None  #: the checkpoint of the last restore
        self._stoppers: list[Callable[[], None]] = []  #: what :meth:`stop` undoes
        self.hurry = False  #: stopping on an error or a signal (:meth:`stop`)
        self.evaluator: Any = None  #: the evaluation actor's handle (:meth:`start_evaluator`)

    @property
    def threads(self) -> int:
        """Torch threads per model actor: ``trainer.torch_threads``, else the cores shared out by mode."""
        t, cores = self.t, os.cpu_count() or 1
        if t.torch_threads:
            return t.torch_threads
        return cores if t.mode == "sync" else max(1, cores // (t.num_rollouters + 1))

    # -- start ----------------------------------------------------------------------------------
    def _lend_cores(self) -> str | None:
        """The token of the run's core boards (:mod:`.cores`), or None when the actors keep their threads
        (:func:`.cores.off_because`: lent only in fully_async, by CPU actors on one node, a single learner
        and transformers rollouters at automatic threads)."""
        import ray

        from .cores import off_because

        t, res = self.t, self.cfg.resources
        if off_because(mode=t.mode, lend=t.lend_idle_cores, torch_threads=t.torch_threads,
                       num_learners=t.num_learners, engine=self.cfg.rollout.engine,
                       gpus_asked=res.learner.num_gpus + res.rollouter.num_gpus,
                       nodes=len([n for n in ray.nodes() if n.get("Alive")])):
            return None
        return f"{os.getpid()}-{uuid.uuid4().hex[:12]}"

    def start(self, init_from: str | None) -> int:
        """Start every actor (the learner from checkpoint ``init_from``, if any); returns the learner's
        policy version."""
        import ray

        from .actors import Learner
        from .actors import MessageQueue
        from .actors import Rollouter

        cfg, t = self.cfg, self.t
        began = time.monotonic()
        starting(f"the actors: {t.num_learners} learner(s), {t.num_rollouters} rollouter(s), "
                 "the reward workers")
        # the placement group first: a cluster that lacks what resources: asks fails before any actor
        self.placement = Placement(cfg.resources, t.num_rollouters, t.num_learners,
                                   evaluators=1 if self.prep.val_dataset is not None else 0)
        self._stoppers.append(self.placement.remove)
        token = self._lend_cores()  # the run's core boards (:mod:`.cores`; None: not lent)
        if token:
            from .cores import remove_board

            # this node's board (one on another node: a few bytes left in its /dev/shm)
            self._stoppers.append(lambda: remove_board(token))
        place = self.placement.options
        opts = {"max_restarts": t.max_restarts, "max_task_retries": 0}
        roll_cls = ray.remote(Rollouter)
        path, threads, slots = self.prep.model_path, self.threads, 1 + t.num_rollouters  # learner: slot 0

        def cores(slot: int) -> tuple[str, int, int, str] | None:
            return (token, slot, slots, t.lend_idle_cores) if token else None

        def rollouter(i: int) -> Any:
            return roll_cls.options(**opts, **place("rollouter", i)).remote(
                path, cfg.rollout, cfg.data, dtype=cfg.rollout.dtype, device=t.device, threads=threads,
                seed=t.seed, cores=cores(1 + i))

        group = ActorGroup("rollouter", rollouter, t.num_rollouters, t.max_restarts)
        self._stoppers.append(lambda: kill_actors(group.handles))
        self.rollouters = Rollouters(group, retries=t.weight_sync_retries, check_weights=self._weights_ok,
                                     deadline_s=t.call_timeout_s)
        self._start_reward_client(opts)
        settings = cfg.learner_settings()
        # a learner that dies is restarted by Ray (or re-created) and told which checkpoint to load
        learner_cls = ray.remote(Learner)
        peers = [place("learner", r) for r in range(1, t.num_learners)]

        def learner(i: int) -> Any:
            return learner_cls.options(**opts, **place("learner")).remote(
                path, settings, seed=t.seed, threads=threads, scale_advantages=t.scale_advantages,
                init_from=init_from, peers=peers, cores=cores(0))

        self.learners = ActorGroup("learner", learner, 1, t.max_restarts)
        self._stoppers.append(lambda: kill_actors(self.learners.handles))
        self.queue = queue = ray.remote(MessageQueue).options(num_cpus=0, max_restarts=0,
                                                              runtime_env=NO_GPU_ENV).remote(
            t.queue_size, t.staleness_limit if t.mode == "fully_async" else 0)
        self._stoppers.append(lambda: kill_actors([queue]))
        version = self._first_infos()
        starting(f"the actors are up ({time.monotonic() - began:.1f}s)")
        return version

    def _start_reward_client(self, opts: dict[str, Any]) -> None:
        """The reward workers are rewardhub.distributed's RewardWorkerPool, driven by one client actor
        (so that scoring overlaps generation and training); the pool heals its own workers."""
        import ray

        from rewardhub.builtin.served import start_for_config

        from .actors import RewardClient

        cfg, t = self.cfg, self.t
        reward = cfg.reward
        # the judges' served models (serve:): started once, here, and held for the run; every reward worker
        # attaches to them, and they stop after the clients (the stoppers run last started first)
        served = start_for_config(reward)

        def stop_served() -> None:
            while served:
                served.pop().close()

        self._stoppers.append(stop_served)
        client_cls = ray.remote(RewardClient)
        workers = reward.workers.num_workers or t.num_reward_workers
        # None: the pool takes reward.workers.num_cpus / num_gpus / resources
        rw = cfg.resources.reward_worker
        rw_opts: dict[str, Any] = {"num_cpus": rw.num_cpus, "num_gpus": rw.num_gpus} if rw is not None else {}
        if rw is not None and rw.resources:
            rw_opts["resources"] = dict(rw.resources)
        self.reward_client = clients = ActorGroup(
            "reward_client", lambda i: client_cls.options(**opts, num_cpus=0, runtime_env=NO_GPU_ENV).remote(
                reward, num_workers=workers, max_restarts=t.max_restarts, batch_size=cfg.samples_per_step,
                reference=self.prep.reward_setup, **rw_opts),
            t.score_concurrency if t.mode == "fully_async" else 1, t.max_restarts)

        def close() -> None:  # the clients close their pools first; then every handle is killed
            # a client still scoring (the run stops on an error or a signal) answers only once its batch
            # is in: not waited for, killed, and Ray stops the reward workers it owned
            try:
                refs = [h.close.remote() for h in clients.handles]
                ray.wait(refs, num_returns=len(refs), timeout=CLOSE_HURRIED_S if self.hurry else CLOSE_S)
            except Exception:  # noqa: BLE001 - gone already: Ray stops what it owned
                pass
            kill_actors(clients.handles)

        self._stoppers.append(close)

    def _first_infos(self) -> int:
        """The actors' first infos: the reward clients' first (a run whose rewards differ stops without
        waiting for the models), then the others'; each actor's ``info()`` is called once. Returns the
        learner's policy version."""
        import ray

        starting("waiting for the reward workers (each builds the registry and loads the rewards)")
        clients = ray.get([h.info.remote() for h in self.reward_client.handles], timeout=600)
        check_infos(clients)
        starting(f"waiting for the learner and the rollouters to load the model {self.prep.model_path}")
        self.workers = self.infos(clients)
        print_choices(self.workers)
        check_infos(self.workers)
        return int(self.workers[0]["version"])

    def infos(self, clients: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
        """Every actor's info: learner ranks, rollouters, reward clients (``clients``: theirs, asked
        already), reward workers."""
        import ray

        handles = [self.learner, *self.rollouters.pool.handles]
        if clients is None:
            handles += self.reward_client.handles
        infos = ray.get([h.info.remote() for h in handles], timeout=600) + list(clients or [])
        infos[1:1] = ray.get(self.learner.ranks.remote(), timeout=600)  # data-parallel ranks 1..N-1
        for h in self.reward_client.handles:
            infos += ray.get(h.workers.remote(), timeout=600)
        return infos

    # -- weights --------------------------------------------------------------------------------
    def sync_weights(self, step: int, *, wait: bool = False) -> None:
        """Send the learner's weights (tagged ``step``) to every rollouter; each acknowledgement is
        checked (now, or as it comes)."""
        self.rollouters.sync(self.learner.get_weights.remote(), step)
        self.weight_syncs += 1
        if wait:
            self.rollouters.settle()

    def synced_step(self, default: int) -> int:
        """The step of the weights the rollouters were last sent (``default``: none sent yet)."""
        weights = self.rollouters.weights
        return int(weights[1]) if weights is not None else default

    def _weights_ok(self) -> None:
        """After a failed acknowledgement: are the weights sent the fault (the learner died, or they are not
        finite)?"""
        import ray

        if self.rollouters.weights is None:
            return
        try:
            ray.get(self.rollouters.weights[0], timeout=600)
        except ACTOR_ERRORS:
            raise LearnerLost from None
        except RayTaskError as exc:
            raise RunAborted(f"learner: weights not sent: {cause(exc)}") from None

    def _count_death(self, point: RestorePoint) -> None:
        """Count a death of the learner: only those in a row stop the run, as a rollouter's. A restore
        to a newer checkpoint than the last restore's means the learner wrote one since (it made
        progress), and the count starts again."""
        self.learner_restarts += 1
        if point != self._restored_to:
            self.learner_in_row = 0
        self._restored_to = point
        self.learner_in_row += 1
        if self.learner_in_row > self.t.max_restarts:
            where = f"checkpoint {point.path}" if point.path else "the run's start (no checkpoint yet)"
            raise RunAborted(f"learner: died {self.learner_in_row} times in a row, each restored to {where} "
                             f"(trainer.max_restarts={self.t.max_restarts}); see the Ray logs of its node "
                             "for the cause")

    def restore_learner(self, point: RestorePoint) -> int:
        """The learner died: once it is back (restarted by Ray or re-created), it loads ``point``'s
        checkpoint unless it started from it. Returns its policy version.

        More than ``trainer.max_restarts`` deaths in a row (with no checkpoint written between them)
        stop the run (:class:`RunAborted`)."""
        import ray

        self._count_death(point)
        handle = self.learners.failed(0)
        wait_alive(handle, "learner")
        try:
            info = ray.get(handle.info.remote(), timeout=600)
            version = int(info["version"])
            if point.path and info.get("loaded_from") != point.path:
                version = int(ray.get(handle.load.remote(point.path), timeout=600))
        except ACTOR_ERRORS as exc:
            raise RunAborted(f"learner: could not be restarted: {cause(exc)}") from None
        return version

    # -- evaluation -----------------------------------------------------------------------------
    def start_evaluator(self, rollout: RolloutConfig) -> None:
        """Start the evaluation actor (once): a rollouter of its own that samples as ``rollout`` says, placed
        like the rollouters, in its own bundle of ``resources.evaluator`` (default: the rollouter's entry)."""
        import ray

        from .actors import Rollouter

        if self.evaluator is not None:
            return
        cfg, t = self.cfg, self.t
        self.evaluator = ray.remote(Rollouter).options(**self.placement.options("evaluator"),
                                                       max_restarts=t.max_restarts).remote(
            self.prep.model_path, rollout, cfg.data, dtype=cfg.rollout.dtype, device=t.device,
            threads=self.threads, seed=t.seed)

    def evaluator_sync(self, step: int) -> None:
        """The evaluation actor takes the learner's weights (tagged ``step``), within trainer.call_timeout_s
        (``GetTimeoutError`` else: :mod:`.evaluate` heals it)."""
        import ray

        assert self.evaluator is not None, "start_evaluator first"
        ray.get(self.evaluator.set_weights.remote(self.learner.get_weights.remote(), step),
                timeout=self.t.call_timeout_s or None)

    def evaluator_generate(self, batch: PromptBatch, step: int) -> Rollout | int:
        """The evaluation actor's rollout of ``batch`` with the weights of ``step``, or the version it holds
        instead (restarted by Ray: the base weights); within trainer.call_timeout_s."""
        import ray

        assert self.evaluator is not None, "start_evaluator first"
        out: Rollout | int = ray.get(self.evaluator.generate.remote(batch, step),
                                     timeout=self.t.call_timeout_s or None)
        return out

    def evaluator_infos(self) -> list[dict[str, Any]]:
        """The evaluation actor's info (``role: evaluator``), once it has started; else none."""
        import ray

        if self.evaluator is None:
            return []
        return [{**ray.get(self.evaluator.info.remote(), timeout=600), "role": "evaluator"}]

    def stop_evaluator(self) -> None:
        if self.evaluator is not None:
            kill_actors([self.evaluator])
            self.evaluator = None

    # -- the end --------------------------------------------------------------------------------
    def counters(self) -> dict[str, int]:
        """The reward pools' restarts and re-scored samples, over every reward client."""
        import ray

        counters = {"restarts": 0, "rescored_samples": 0}
        for c in ray.get([h.counters.remote() for h in self.reward_client.handles]):
            counters = {k: counters[k] + c[k] for k in counters}
        return counters

    def stop(self, *, hurry: bool = False) -> None:
        """Stop whatever was started (idempotent): no process or placement group is left behind.

        ``hurry``: the run stops on an error or a signal, and a reward client may be busy scoring: its
        pool's close is waited for only :data:`CLOSE_HURRIED_S` (then it is killed), so that SIGTERM
        and Ctrl-C end the run within seconds."""
        self.hurry = hurry
        while self._stoppers:  # the last started first: the queue, ..., the placement group last
            self._stoppers.pop()()

