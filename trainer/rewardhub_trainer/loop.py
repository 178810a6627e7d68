"""Orchestration: ``sync`` (generate, score, train in lock-step) and ``fully_async`` (they overlap).

The driver owns the bookkeeping, so the accounting is exact: a sample is *generated* when its
rollout comes back from a rollouter, and then ends as *trained*, *dropped as stale* (by the message
queue, counted here) or *unused at the end*. A rollouter that dies mid-call is restarted by Ray
(``max_restarts``) or re-created, gets the current weights again, and the same batch is resubmitted:
a lost call never produced samples, so nothing is lost or counted twice. A reward worker that dies
is restarted by its :class:`rewardhub.distributed.RewardWorkerPool`, which re-scores only the
samples that worker had not returned, so each sample is still scored once.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .actors import PromptBatch
from .actors import Rollout
from .checkpoint import latest_checkpoint
from .checkpoint import read_state
from .checkpoint import write_state
from .devices import devices_summary
from .devices import print_choices
from .prepare import Prepared
from .stats import StepStats

__all__ = ["Run", "start_ray"]

# Ray is imported here (not by config/prepare): this module is loaded only once the config is valid.
from ray.exceptions import ActorUnavailableError  # noqa: E402
from ray.exceptions import RayActorError  # noqa: E402

_ACTOR_ERRORS = (RayActorError, ActorUnavailableError)

StepCallback = Callable[[int, Mapping[str, Any], "Run"], None]


def start_ray(num_cpus: int | None = None) -> None:
    """Connect to ``RAY_ADDRESS`` or start a local Ray (no dashboard) unless one is running."""
    import ray

    if ray.is_initialized():
        return
    if os.environ.get("RAY_ADDRESS"):
        ray.init(address=os.environ["RAY_ADDRESS"], log_to_driver=False)
        return
    # address="local": a new Ray of this run's own, never a cluster another process started here
    ray.init(address="local", num_cpus=num_cpus or max(4, os.cpu_count() or 1), include_dashboard=False,
             log_to_driver=False, configure_logging=False)


class _Pool:
    """Handles of one role, re-created when Ray has no restarts left for one."""

    def __init__(self, role: str, factory: Callable[[int], Any], size: int, max_restarts: int) -> None:
        self.role = role
        self.factory = factory  #: slot index -> a new handle (its placement bundle is the slot's)
        self.handles = [factory(i) for i in range(size)]
        self.failures = [0] * size
        self.max_restarts = max_restarts
        self.restarts = 0
        self.recreated = 0

    def failed(self, i: int) -> Any:
        """Record a failed call on handle ``i``; return the handle to resubmit to."""
        import ray

        self.failures[i] += 1
        self.restarts += 1
        if self.failures[i] > self.max_restarts:
            try:
                ray.kill(self.handles[i], no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
            self.handles[i] = self.factory(i)
            self.failures[i] = 0
            self.recreated += 1
        return self.handles[i]


class Run:
    """One training run; :meth:`run` returns the summary it also writes to ``summary.json``."""

    def __init__(self, prep: Prepared, output: str | os.PathLike[str], *, resume: str | None = None,
                 callbacks: tuple[StepCallback, ...] = ()) -> None:
        self.prep = prep
        self.cfg = prep.cfg
        self.t = prep.cfg.trainer
        self.out = Path(output)
        self.out.mkdir(parents=True, exist_ok=True)
        self.callbacks = callbacks
        self.resume_ckpt = latest_checkpoint(Path(resume)) if resume else None
        if resume and self.resume_ckpt is None:
            from rewardhub.errors import UsageError

            raise UsageError(f"--resume: no checkpoint in {resume!r}\n"
                             "point it at the --output folder of an earlier run")
        self.counts = {"generated": 0, "trained": 0, "dropped_stale": 0}
        self.prior = {"generated": 0, "trained": 0, "dropped_stale": 0}
        self.step = 0
        self.cursor = 0  # next batch index to generate
        self.consumed = 0  # next batch index the queue will hand out (trained or dropped)
        self.max_staleness = 0
        self.weight_syncs = 0
        self.lost_calls = {"rollouter": 0, "reward_client": 0}
        self.resumed_from: int | None = None
        if self.resume_ckpt is not None:
            state = read_state(self.resume_ckpt)
            self.step = int(state["step"])
            self.cursor = self.consumed = int(state["data_cursor"])
            self.prior = dict(state["counts"])
            self.max_staleness = int(state.get("max_staleness_seen", 0))
            self.resumed_from = self.step
        self.stats = StepStats(self.out, self.cfg.samples_per_step, resumed_from=self.resumed_from,
                               resume_dir=Path(resume) if resume else None,
                               num_rollouters=self.t.num_rollouters)
        self._weights: tuple[Any, int] | None = None

    # -- actors ------------------------------------------------------------------------------
    def _threads(self) -> int:
        if self.t.torch_threads:
            return self.t.torch_threads
        cores = os.cpu_count() or 1
        if self.t.mode == "sync":
            return cores
        return max(1, cores // (self.t.num_rollouters + 1))

    def _start_actors(self) -> None:
        import ray

        from .actors import Learner
        from .actors import MessageQueue
        from .actors import RewardClient
        from .actors import Rollouter
        from .placement import Placement

        cfg, t = self.cfg, self.t
        # the placement group first: a cluster that lacks what resources: asks fails before any actor
        self.placement = Placement(cfg.resources, t.num_rollouters)
        place = self.placement.options
        reward = dict(cfg.reward)
        opts = {"max_restarts": t.max_restarts, "max_task_retries": 0}
        roll_cls = ray.remote(Rollouter)
        client_cls = ray.remote(RewardClient)
        rollout = dataclasses.asdict(cfg.rollout)
        data = dataclasses.asdict(cfg.data)
        path, threads = self.prep.model_path, self._threads()
        self.rollouters = _Pool("rollouter", lambda i: roll_cls.options(**opts, **place("rollouter", i)).remote(
            path, rollout, data, reward, dtype=cfg.rollout.dtype, device=t.device, threads=threads, seed=t.seed),
            t.num_rollouters, t.max_restarts)
        # the reward workers are rewardhub.distributed's RewardWorkerPool, driven by one client actor
        # (so that scoring overlaps generation and training); the pool heals its own workers
        workers = int((reward.get("workers") or {}).get("num_workers") or 0) or t.num_reward_workers
        rw = cfg.resources.reward_worker  # None: the pool takes reward.workers.num_cpus / num_gpus
        rw_opts = {"num_cpus": rw.num_cpus, "num_gpus": rw.num_gpus} if rw is not None else {}
        self.reward_client = _Pool("reward_client", lambda i: client_cls.options(**opts, num_cpus=0).remote(
            reward, num_workers=workers, max_restarts=t.max_restarts, batch_size=cfg.samples_per_step,
            **rw_opts),
            t.score_concurrency if t.mode == "fully_async" else 1, t.max_restarts)
        settings = {"lr": t.lr, "kl_coef": t.kl_coef, "clip_eps": t.clip_eps, "ppo_epochs": t.ppo_epochs,
                    "micro_batch_size": t.micro_batch_size, "max_grad_norm": t.max_grad_norm,
                    "weight_decay": t.weight_decay, "temperature": cfg.rollout.temperature,
                    "dtype": cfg.model.dtype, "autocast": t.autocast, "device": t.device}
        self.learner = ray.remote(Learner).options(**place("learner"), max_restarts=0).remote(
            path, settings, reward, seed=t.seed, threads=threads, scale_advantages=t.scale_advantages,
            init_from=str(self.resume_ckpt) if self.resume_ckpt else None)
        self.queue = ray.remote(MessageQueue).options(num_cpus=0, max_restarts=0).remote(
            t.queue_size, t.staleness_limit if t.mode == "fully_async" else 0)
        self.workers = self._infos()
        print_choices(self.workers)
        self._check_fingerprints(self.workers)
        if self.step > 0:  # resumed: the rollouters start from the checkpoint's weights
            self._sync_weights(wait=True)

    def _infos(self) -> list[dict[str, Any]]:
        import ray

        handles = [self.learner, *self.rollouters.handles, *self.reward_client.handles]
        infos = ray.get([h.info.remote() for h in handles], timeout=600)
        for h in self.reward_client.handles:
            infos += ray.get(h.workers.remote(), timeout=600)
        return infos

    def _check_fingerprints(self, infos: list[dict[str, Any]]) -> None:
        from rewardhub.errors import UsageError

        for w in infos:
            if w["registry_fingerprint"] != self.prep.fingerprint:
                raise UsageError(
                    f"reward registry differs on {w['role']} (node {w['node']}, pid {w['pid']})\n"
                    f"driver: {self.prep.fingerprint}\nworker: {w['registry_fingerprint']}\n"
                    "install the same reward packages and files on every node")

    def _sync_weights(self, *, wait: bool = False) -> None:
        import ray

        ref = self.learner.get_weights.remote()
        self._weights = (ref, self.step)
        acks = [h.set_weights.remote(ref, self.step) for h in self.rollouters.handles]
        self.weight_syncs += 1
        if not wait:
            return  # a failed ack shows up as a failed generate on that actor, handled there
        for i, ack in enumerate(acks):
            while True:
                try:
                    ray.get(ack)
                    break
                except _ACTOR_ERRORS:
                    self.lost_calls["rollouter"] += 1
                    ack = self.rollouters.failed(i).set_weights.remote(ref, self.step)

    def _resubmit_generate(self, i: int, batch: PromptBatch) -> Any:
        handle = self.rollouters.failed(i)
        self.lost_calls["rollouter"] += 1
        if self._weights is not None:  # a restarted actor starts from the base weights
            handle.set_weights.remote(self._weights[0], self._weights[1])
        return handle.generate.remote(batch)

    def _arrives_fresh(self, training: bool, ahead: int) -> bool:
        """Would a batch started now be within the staleness bound when the learner reaches it?

        Batches are consumed in order, one step each, so it is trained at version
        ``step + training + ahead``; the rollouter generates with the last synced version.
        """
        version = self._weights[1] if self._weights is not None else self.resumed_from or 0
        return self.step + int(training) + ahead - version <= self.t.staleness_limit

    def _next_batch(self) -> PromptBatch:
        size = self.cfg.rollout.prompts_per_step
        pairs = self.prep.dataset.batch(self.cursor, size)
        batch = PromptBatch(index=self.cursor, prompts=[p for _, p in pairs],
                            dataset_indices=[i for i, _ in pairs])
        self.cursor += 1
        return batch

    # -- bookkeeping -------------------------------------------------------------------------
    def _dropped(self, dropped: list[dict[str, int]]) -> None:
        for d in dropped:
            self.counts["dropped_stale"] += d["samples"]
            self.consumed = d["batch_index"] + 1
            self.stats.dropped(d)

    def _trained(self, item: Rollout, staleness: int, result: Mapping[str, float]) -> None:
        self.counts["trained"] += item.num_samples
        self.consumed = item.batch.index + 1
        self.step += 1
        self.max_staleness = max(self.max_staleness, staleness)
        metrics = self.stats.step(self.step, item, staleness, result, self._totals(),
                                  queue_size=self._queue_size)
        for cb in self.callbacks:
            cb(self.step, metrics, self)
        every = self.t.checkpoint_every
        if (every and self.step % every == 0) or self.step == self.t.total_steps:
            self._checkpoint()

    def _totals(self) -> dict[str, int]:
        return {k: self.prior[k] + self.counts[k] for k in self.counts}

    def _checkpoint(self) -> None:
        import ray

        path = self.out / "checkpoints" / f"step_{self.step:06d}"
        ray.get(self.learner.save.remote(str(path)))
        # Only what was consumed is carried over: batches still in flight are regenerated on resume.
        totals = self._totals()
        carried = {"trained": totals["trained"], "dropped_stale": totals["dropped_stale"],
                   "generated": totals["trained"] + totals["dropped_stale"]}
        write_state(path, {"step": self.step, "data_cursor": self.consumed, "counts": carried,
                           "max_staleness_seen": self.max_staleness, "config": self.cfg.to_dict()})

    # -- modes -------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        self._queue_size = 0
        self._start_actors()
        self.stats.start()
        if self.step < self.t.total_steps:
            if self.t.mode == "sync":
                leftovers = self._run_sync()
            else:
                leftovers = self._run_async()
        else:
            leftovers = []
        self.stats.finish()
        return self._finish(leftovers)

    def _call(self, pool: Any, i: int, method: str, arg: Any) -> Any:
        import ray

        while True:
            handle = pool.handles[i]
            try:
                return ray.get(getattr(handle, method).remote(arg))
            except _ACTOR_ERRORS:
                self.lost_calls[pool.role] += 1
                handle = pool.failed(i)
                if pool.role == "rollouter" and self._weights is not None:
                    handle.set_weights.remote(self._weights[0], self._weights[1])

    def _run_sync(self) -> list[Rollout]:
        import ray

        while self.step < self.t.total_steps:
            t0 = time.perf_counter()
            rollout = self._call(self.rollouters, 0, "generate", self._next_batch())
            self.counts["generated"] += rollout.num_samples
            self.stats.busy("rollouter", rollout.gen_s)
            rollout = self._call(self.reward_client, 0, "score", rollout)
            ray.get(self.queue.put.remote(rollout))
            item, dropped = ray.get(self.queue.get.remote(self.step))
            self._dropped(dropped)
            assert item is not None and not dropped, "sync mode never has stale samples"
            result = ray.get(self.learner.train.remote(item))
            self.stats.busy("learner", result["train_s"])
            self.stats.busy("step", time.perf_counter() - t0)
            self._trained(item, self.step - item.version, result)
            if self.step < self.t.total_steps:
                self._sync_weights(wait=True)  # lock-step: the next batch uses the new policy
        return ray.get(self.queue.drain.remote())

    def _run_async(self) -> list[Rollout]:
        import ray

        t = self.t
        gen: dict[Any, tuple[int, PromptBatch]] = {}
        score: dict[Any, tuple[int, Rollout]] = {}
        ready: dict[int, Rollout] = {}  # scored, waiting to enter the queue in batch order
        next_put = self.cursor
        queued = 0
        train: tuple[Any, Rollout, int] | None = None
        idle_roll = set(range(t.num_rollouters))
        # each reward client scores one batch at a time, spread over its pool's workers
        idle_rw = list(range(len(self.reward_client.handles)))
        waiting_score: list[Rollout] = []

        def outstanding() -> int:
            return len(gen) + len(score) + len(waiting_score) + len(ready) + queued

        while self.step < t.total_steps:
            # 1. keep the rollouters busy, within the queue bound and the batches still needed
            while idle_roll and outstanding() < t.queue_size and (
                    self.step + (train is not None) + outstanding() < t.total_steps) and (
                    not t.staleness_gate or self._arrives_fresh(train is not None, outstanding())):
                i = idle_roll.pop()
                batch = self._next_batch()
                gen[self.rollouters.handles[i].generate.remote(batch)] = (i, batch)
            while waiting_score and idle_rw:
                w = idle_rw.pop()
                item = waiting_score.pop(0)
                score[self.reward_client.handles[w].score.remote(item)] = (w, item)
            # 2. move scored rollouts into the queue in batch order
            while next_put in ready:
                queued = ray.get(self.queue.put.remote(ready.pop(next_put)))
                next_put += 1
            # 3. feed the learner
            if train is None and queued:
                item, dropped = ray.get(self.queue.get.remote(self.step))
                queued = ray.get(self.queue.size.remote())
                self._dropped(dropped)
                if item is not None:
                    staleness = self.step - item.version
                    assert staleness <= t.staleness_limit
                    train = (self.learner.train.remote(item), item, staleness)
                continue  # drops may have freed room for more generation
            self._queue_size = queued
            refs = list(gen) + list(score) + ([train[0]] if train else [])
            if not refs:
                raise RuntimeError("fully_async loop stalled with nothing in flight")
            done, _ = ray.wait(refs, num_returns=1, timeout=60.0)
            for ref in done:
                if ref in gen:
                    i, batch = gen.pop(ref)
                    try:
                        rollout = ray.get(ref)
                    except _ACTOR_ERRORS:
                        gen[self._resubmit_generate(i, batch)] = (i, batch)
                        continue
                    idle_roll.add(i)
                    self.counts["generated"] += rollout.num_samples
                    self.stats.busy("rollouter", rollout.gen_s)
                    waiting_score.append(rollout)
                elif ref in score:
                    w, item = score.pop(ref)
                    try:
                        scored = ray.get(ref)
                    except _ACTOR_ERRORS:
                        self.lost_calls["reward_client"] += 1
                        handle = self.reward_client.failed(w)
                        score[handle.score.remote(item)] = (w, item)
                        continue
                    idle_rw.append(w)
                    ready[scored.batch.index] = scored
                else:
                    assert train is not None
                    result = ray.get(ref)
                    _, item, staleness = train
                    train = None
                    self.stats.busy("learner", result["train_s"])
                    self._trained(item, staleness, result)
                    synced = self._weights[1] if self._weights is not None else self.resumed_from or 0
                    # sync every sync_interval steps, and whenever the rollouters' weights are so old
                    # that everything they generate would be dropped (else the run could not progress)
                    if self.step < t.total_steps and (self.step % t.sync_interval == 0
                                                      or self.step - synced > t.staleness_limit):
                        self._sync_weights()
        # the end: whatever is still in flight was generated (or will be) but not trained
        leftovers: list[Rollout] = []
        for ref, (i, batch) in list(gen.items()):
            try:
                rollout = ray.get(ref)
            except _ACTOR_ERRORS:
                continue  # never produced: not generated
            self.counts["generated"] += rollout.num_samples
            self.stats.busy("rollouter", rollout.gen_s)
            leftovers.append(rollout)
        for ref, (_, item) in score.items():
            leftovers.append(item)
            try:
                ray.get(ref)
            except _ACTOR_ERRORS:
                pass
        leftovers += waiting_score + list(ready.values())
        leftovers += ray.get(self.queue.drain.remote())
        return leftovers

    # -- the end -----------------------------------------------------------------------------
    def _finish(self, leftovers: list[Rollout]) -> dict[str, Any]:
        import ray

        unused = sum(r.num_samples for r in leftovers)
        totals = self._totals()
        workers = self._infos()
        self._check_fingerprints(workers)
        counters = {"restarts": 0, "rescored_samples": 0}
        for c in ray.get([h.counters.remote() for h in self.reward_client.handles]):
            counters = {k: counters[k] + c[k] for k in counters}
        summary = {
            "mode": self.t.mode,
            "samples_generated": totals["generated"],
            "samples_trained": totals["trained"],
            "samples_dropped_stale": totals["dropped_stale"],
            "samples_unused_at_end": unused,
            "accounting_exact": totals["generated"] == totals["trained"] + totals["dropped_stale"] + unused,
            "max_staleness_seen": self.max_staleness,
            "staleness_limit": self.t.staleness_limit if self.t.mode == "fully_async" else 0,
            "sync_interval": self.t.sync_interval if self.t.mode == "fully_async" else 1,
            "steps": self.step,
            "total_steps": self.t.total_steps,
            "resumed_from_step": self.resumed_from,
            "weight_syncs": self.weight_syncs,
            "driver_pid": os.getpid(),
            "driver_fingerprint": self.prep.fingerprint,
            "workers": [{**{k: w[k] for k in ("role", "node", "pid", "registry_fingerprint")},
                         **{k: w[k] for k in ("pool", "gpu_ids", "device", "dtype") if k in w}} for w in workers],
            "devices": devices_summary(workers),
            "resources": self.cfg.resources.to_dict(),
            "restarts": {"rollouter": self.rollouters.restarts, "reward_client": self.reward_client.restarts,
                         "reward_worker": counters["restarts"]},
            "recreated": {"rollouter": self.rollouters.recreated,
                          "reward_client": self.reward_client.recreated},
            "rescored_samples": counters["rescored_samples"],
            "lost_calls": dict(self.lost_calls),
            "reward_pids": sorted(self.stats.reward_pids),
            "model_path": self.prep.model_path,
            **self.stats.summary(),
        }
        for h in self.reward_client.handles:
            try:
                ray.get(h.close.remote(), timeout=60)
            except Exception:  # noqa: BLE001 - gone already: Ray stops what it owned
                pass
        for h in [self.learner, self.queue, *self.rollouters.handles, *self.reward_client.handles]:
            try:
                ray.kill(h, no_restart=True)
            except Exception:  # noqa: BLE001
                pass
        self.placement.remove()
        (self.out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
        return summary
