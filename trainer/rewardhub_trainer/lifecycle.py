"""The actors of a run: their start-up, the weights sent to the rollouters, and their stop.

:class:`Lifecycle` is a part of :class:`rewardhub_trainer.loop.Run` kept in its own module (as
:mod:`.recovery` is). The placement group is made first, so a cluster that lacks the resources the
config asks for fails before any actor starts; every actor is created through a
:class:`rewardhub_trainer.faults.ActorGroup`, which restarts or re-creates it when it dies.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

from .devices import NO_GPU_ENV
from .devices import print_choices
from .faults import ActorGroup
from .faults import Rollouters
from .faults import RunAborted
from .runstate import RunState

__all__ = ["Lifecycle"]


class Lifecycle(RunState):
    """Start, feed weights to, and stop the actors of a run (mixed into ``Run``)."""

    def _threads(self) -> int:
        if self.t.torch_threads:
            return self.t.torch_threads
        cores = os.cpu_count() or 1
        if self.t.mode == "sync":
            return cores
        return max(1, cores // (self.t.num_rollouters + 1))

    def _cores(self) -> str | None:
        """The token of the run's core boards (:mod:`.cores`), or None when the actors keep their threads
        (:func:`.cores.off_because`: lent only in fully_async, by CPU actors on one node, a single learner
        and transformers rollouters at automatic threads)."""
        import ray

        from .cores import off_because

        t, res = self.t, self.cfg.resources
        if off_because(
            mode=t.mode,
            lend=t.lend_idle_cores,
            torch_threads=t.torch_threads,
            num_learners=t.num_learners,
            engine=self.cfg.rollout.engine,
            gpus_asked=res.learner.num_gpus + res.rollouter.num_gpus,
            nodes=len([n for n in ray.nodes() if n.get("Alive")]),
        ):
            return None
        return f"{os.getpid()}-{uuid.uuid4().hex[:12]}"

    @property
    def learner(self) -> Any:
        return self.learners.handles[0]

    def _start_actors(self) -> None:
        import ray

        from .actors import Learner
        from .actors import MessageQueue
        from .actors import Rollouter
        from .placement import Placement

        cfg, t = self.cfg, self.t
        # the placement group first: a cluster that lacks what resources: asks fails before any actor
        self.placement = Placement(cfg.resources, t.num_rollouters, t.num_learners,
                                   evaluators=1 if self.prep.val_dataset is not None else 0)
        place = self.placement.options
        opts = {"max_restarts": t.max_restarts, "max_task_retries": 0}
        roll_cls = ray.remote(Rollouter)
        rollout, data = cfg.rollout, cfg.data  # the typed sections, shipped as they are
        path, threads = self.prep.model_path, self._threads()
        self.cores_token = token = self._cores()
        slots = 1 + t.num_rollouters  # the learner's slot is 0

        def cores(slot: int) -> tuple[str, int, int, str] | None:
            return (token, slot, slots, t.lend_idle_cores) if token else None

        self.rollouters = Rollouters(
            ActorGroup(
                "rollouter",
                lambda i: roll_cls.options(**opts, **place("rollouter", i)).remote(
                    path,
                    rollout,
                    data,
                    dtype=cfg.rollout.dtype,
                    device=t.device,
                    threads=threads,
                    seed=t.seed,
                    cores=cores(1 + i),
                ),
                t.num_rollouters,
                t.max_restarts,
            ),
            retries=t.weight_sync_retries,
            check_weights=self._weights_ok,
            deadline_s=t.call_timeout_s,
        )
        self._start_reward_client(opts)
        settings = {
            "lr": t.lr,
            "kl_coef": t.kl_coef,
            "clip_eps": t.clip_eps,
            "clip_ratio_c": t.clip_ratio_c,
            "ppo_epochs": t.ppo_epochs,
            "micro_batch_size": t.micro_batch_size,
            "max_grad_norm": t.max_grad_norm,
            "weight_decay": t.weight_decay,
            "temperature": cfg.rollout.temperature,
            "dtype": cfg.model.dtype,
            "autocast": t.autocast,
            "lr_schedule": t.lr_schedule,
            "lr_warmup_steps": t.lr_warmup_steps,
            "min_lr_ratio": t.min_lr_ratio,
            "total_steps": t.total_steps,
            "entropy_coeff": t.entropy_coeff,
            "loss_agg_mode": t.loss_agg_mode,
            "device": t.device,
        }
        # a learner that dies is restarted by Ray (or re-created) and told which checkpoint to load
        learner_cls = ray.remote(Learner)
        init_from = str(self.resume_ckpt) if self.resume_ckpt else None
        self.learners = ActorGroup(
            "learner",
            lambda i: learner_cls.options(**opts, **place("learner")).remote(
                path,
                settings,
                seed=t.seed,
                threads=threads,
                scale_advantages=t.scale_advantages,
                init_from=init_from,
                peers=[place("learner", r) for r in range(1, t.num_learners)],
                cores=cores(0),
            ),
            1,
            t.max_restarts,
        )
        self.queue = (
            ray.remote(MessageQueue)
            .options(num_cpus=0, max_restarts=0, runtime_env=NO_GPU_ENV)
            .remote(t.queue_size, t.staleness_limit if t.mode == "fully_async" else 0)
        )
        self._first_infos()
        if self.step > 0:  # resumed: the rollouters start from the checkpoint's weights
            self._sync_weights(wait=True)

    def _start_reward_client(self, opts: dict[str, Any]) -> None:
        """The reward workers are rewardhub.distributed's RewardWorkerPool, driven by one client actor
        (so that scoring overlaps generation and training); the pool heals its own workers."""
        import ray

        from .actors import RewardClient

        cfg, t = self.cfg, self.t
        reward = cfg.reward
        client_cls = ray.remote(RewardClient)
        workers = reward.workers.num_workers or t.num_reward_workers
        # None: the pool takes reward.workers.num_cpus / num_gpus / resources
        rw = cfg.resources.reward_worker
        rw_opts: dict[str, Any] = {"num_cpus": rw.num_cpus, "num_gpus": rw.num_gpus} if rw is not None else {}
        if rw is not None and rw.resources:
            rw_opts["resources"] = dict(rw.resources)
        self.reward_client = ActorGroup("reward_client", lambda i: client_cls.options(**opts, num_cpus=0,
                                                                                runtime_env=NO_GPU_ENV).remote(
            reward, num_workers=workers, max_restarts=t.max_restarts, batch_size=cfg.samples_per_step,
            reference=self.prep.reward_setup, **rw_opts),
            t.score_concurrency if t.mode == "fully_async" else 1, t.max_restarts)

    def _first_infos(self) -> None:
        """The actors' first infos: the reward clients' first (a run whose rewards differ stops without
        waiting for the models), then the others'; each actor's ``info()`` is called once."""
        import ray

        clients = ray.get([h.info.remote() for h in self.reward_client.handles], timeout=600)
        self._check_fingerprints(clients)
        self.workers = self._infos(clients)
        print_choices(self.workers)
        self._check_fingerprints(self.workers)
        self.versions[self.step] = int(self.workers[0]["version"])

    def _infos(self, clients: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
        """Every actor's info: learner ranks, rollouters, reward clients (``clients``: theirs, asked
        already), reward workers, the evaluator once it has started."""
        import ray

        handles = [self.learner, *self.rollouters.pool.handles]
        if clients is None:
            handles += self.reward_client.handles
        infos = ray.get([h.info.remote() for h in handles], timeout=600) + list(clients or [])
        infos[1:1] = ray.get(self.learner.ranks.remote(), timeout=600)  # data-parallel ranks 1..N-1
        for h in self.reward_client.handles:
            infos += ray.get(h.workers.remote(), timeout=600)
        evaluator = getattr(self, "evaluator", None)
        return infos + (evaluator.infos() if evaluator is not None else [])

    def _check_fingerprints(self, infos: list[dict[str, Any]]) -> None:
        """Only the reward workers call rewards: their pool compared, at start-up, each reward the
        config uses with the driver's (a reward client reports the pool's refusal, naming each)."""
        for w in infos:
            if w.get("error"):  # a reward client's refused pool, or a learner rank that cannot run
                raise RunAborted(f"{w['role']} on {w['hostname']} (node id {str(w['node'])[:12]}, pid "
                                 f"{w['pid']}): {w['error']}")

    def _sync_weights(self, *, wait: bool = False) -> None:
        """Send the learner's weights to every rollouter; each acknowledgement is checked (now, or as it
        comes)."""
        self.rollouters.sync(self.learner.get_weights.remote(), self.step)
        self.weight_syncs += 1
        if wait:
            self.rollouters.settle()

    def _stop_actors(self) -> None:
        import ray

        evaluator = getattr(self, "evaluator", None)
        if evaluator is not None:
            evaluator.close()
        clients = getattr(self, "reward_client", None)
        for h in clients.handles if clients is not None else []:
            try:
                ray.get(h.close.remote(), timeout=60)
            except Exception:  # noqa: BLE001 - gone already: Ray stops what it owned
                pass
        handles = [getattr(self, "queue", None)]
        for pool in (
            getattr(self, "learners", None),
            clients,
            getattr(getattr(self, "rollouters", None), "pool", None),
        ):
            handles += pool.handles if pool is not None else []
        for h in handles:
            if h is None:
                continue
            try:
                ray.kill(h, no_restart=True)
            except Exception:  # noqa: BLE001
                pass
        placement = getattr(self, "placement", None)
        if placement is not None:
            placement.remove()
        token = getattr(self, "cores_token", None)
        if token:
            from .cores import remove_board

            remove_board(token)  # this node's (one on another node: a few bytes left in its /dev/shm)
