"""Orchestration: ``sync`` (generate, score, train in lock-step) and ``fully_async`` (they overlap).

The driver owns the bookkeeping, so the accounting is exact: a sample is *generated* when its
rollout comes back from a rollouter, and then ends as *trained*, *dropped as stale* (by the message
queue, counted here), *unused at the end*, or *lost on restart* (the learner died: what it trained
after its latest checkpoint, and everything in flight, is thrown away and the run continues from
that checkpoint). A rollouter that dies mid-call is restarted by Ray (``max_restarts``) or
re-created, gets the current weights again, and the same batch is resubmitted: a lost call never
produced samples, so nothing is lost or counted twice (:mod:`rewardhub_trainer.faults`). A reward
worker that dies is restarted by its :class:`rewardhub.distributed.RewardWorkerPool`, which
re-scores only the samples that worker had not returned, so each sample is still scored once.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .actors import PromptBatch
from .actors import Rollout
from .checkpoint import latest_checkpoint
from .checkpoint import read_state
from .devices import devices_summary
from .devices import print_choices
from .prepare import Prepared
from .recovery import Recovery
from .rewards import provenance
from .stats import StepStats

__all__ = ["Run", "RunAborted", "start_ray"]

# Ray is imported here (not by config/prepare): this module is loaded only once the config is valid.
from .faults import ACTOR_ERRORS as _ACTOR_ERRORS  # noqa: E402
from .faults import LearnerLost  # noqa: E402
from .faults import Pool  # noqa: E402
from .faults import Rollouters  # noqa: E402
from .faults import RunAborted  # noqa: E402
from .faults import wait_alive  # noqa: E402

StepCallback = Callable[[int, Mapping[str, Any], "Run"], None]
COUNTS = ("generated", "trained", "dropped_stale", "lost_on_restart")


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


@dataclasses.dataclass
class _Flight:
    """What is between the rollouters and the learner (generate calls are in :class:`Rollouters`)."""

    next_put: int  #: the batch index the queue takes next
    score: dict[Any, tuple[int, Rollout]] = dataclasses.field(default_factory=dict)
    waiting: list[Rollout] = dataclasses.field(default_factory=list)  #: generated, waiting for a scorer
    ready: dict[int, Rollout] = dataclasses.field(default_factory=dict)  #: scored, waiting for its turn
    queued: int = 0
    train: tuple[Any, Rollout, int] | None = None  #: the learner's call, its batch and staleness


class Run(Recovery):
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
        self.counts = dict.fromkeys(COUNTS, 0)
        self.prior = dict.fromkeys(COUNTS, 0)
        self.step = 0
        self.cursor = 0  # next batch index to generate
        self.consumed = 0  # next batch index the queue will hand out (trained or dropped)
        self.max_staleness = 0
        self.lost_calls = {"rollouter": 0, "reward_client": 0}
        self.resumed_from: int | None = None
        if self.resume_ckpt is not None:
            state = read_state(self.resume_ckpt)
            self.step = int(state["step"])
            self.cursor = self.consumed = int(state["data_cursor"])
            self.prior.update(state["counts"])
            self.max_staleness = int(state.get("max_staleness_seen", 0))
            self.resumed_from = self.step
        self.stats = StepStats(self.out, self.cfg.samples_per_step, resumed_from=self.resumed_from,
                               resume_dir=Path(resume) if resume else None,
                               num_rollouters=self.t.num_rollouters)
        # where a restarted learner continues from: the latest checkpoint of this run (or its start)
        self.restore_point = {"path": str(self.resume_ckpt) if self.resume_ckpt else None, "step": self.step,
                              "cursor": self.cursor, "trained": self.prior["trained"]}
        self.versions: dict[int, int] = {}  # weights tag (a step) -> policy version (optimizer updates)
        self.learner_restarts = 0
        self.learner_restores: list[dict[str, Any]] = []  # each restart: from which step, to which checkpoint
        self.weight_syncs = 0
        self.stale_in_row = self.max_stale_in_row = 0
        self.skipped_updates = 0
        self.last_checkpoint_t = time.monotonic()
        self._reset_flight()
        self._queue_size = 0

    # -- actors ------------------------------------------------------------------------------
    def _threads(self) -> int:
        if self.t.torch_threads:
            return self.t.torch_threads
        cores = os.cpu_count() or 1
        if self.t.mode == "sync":
            return cores
        return max(1, cores // (self.t.num_rollouters + 1))

    @property
    def learner(self) -> Any:
        return self.learners.handles[0]

    def _start_actors(self) -> None:
        import ray

        from .actors import Learner
        from .actors import MessageQueue
        from .actors import RewardClient
        from .actors import Rollouter
        from .placement import Placement

        cfg, t = self.cfg, self.t
        # the placement group first: a cluster that lacks what resources: asks fails before any actor
        self.placement = Placement(cfg.resources, t.num_rollouters, t.num_learners)
        place = self.placement.options
        reward = dict(cfg.reward)
        opts = {"max_restarts": t.max_restarts, "max_task_retries": 0}
        roll_cls = ray.remote(Rollouter)
        client_cls = ray.remote(RewardClient)
        rollout = dataclasses.asdict(cfg.rollout)
        data = dataclasses.asdict(cfg.data)
        path, threads = self.prep.model_path, self._threads()
        self.rollouters = Rollouters(Pool("rollouter", lambda i: roll_cls.options(**opts, **place("rollouter", i)).remote(
            path, rollout, data, dtype=cfg.rollout.dtype, device=t.device, threads=threads, seed=t.seed),
            t.num_rollouters, t.max_restarts), retries=t.weight_sync_retries, check_weights=self._weights_ok)
        # the reward workers are rewardhub.distributed's RewardWorkerPool, driven by one client actor
        # (so that scoring overlaps generation and training); the pool heals its own workers
        workers = int((reward.get("workers") or {}).get("num_workers") or 0) or t.num_reward_workers
        rw = cfg.resources.reward_worker  # None: the pool takes reward.workers.num_cpus / num_gpus
        rw_opts = {"num_cpus": rw.num_cpus, "num_gpus": rw.num_gpus} if rw is not None else {}
        self.reward_client = Pool("reward_client", lambda i: client_cls.options(**opts, num_cpus=0).remote(
            reward, num_workers=workers, max_restarts=t.max_restarts, batch_size=cfg.samples_per_step,
            **rw_opts),
            t.score_concurrency if t.mode == "fully_async" else 1, t.max_restarts)
        settings = {"lr": t.lr, "kl_coef": t.kl_coef, "clip_eps": t.clip_eps, "ppo_epochs": t.ppo_epochs,
                    "micro_batch_size": t.micro_batch_size, "max_grad_norm": t.max_grad_norm,
                    "weight_decay": t.weight_decay, "temperature": cfg.rollout.temperature,
                    "dtype": cfg.model.dtype, "autocast": t.autocast, "lr_schedule": t.lr_schedule,
                    "lr_warmup_steps": t.lr_warmup_steps, "min_lr_ratio": t.min_lr_ratio, "total_steps": t.total_steps,
                    "entropy_coeff": t.entropy_coeff, "loss_agg_mode": t.loss_agg_mode, "device": t.device}
        # a learner that dies is restarted by Ray (or re-created) and told which checkpoint to load
        learner_cls = ray.remote(Learner)
        init_from = str(self.resume_ckpt) if self.resume_ckpt else None
        self.learners = Pool("learner", lambda i: learner_cls.options(**opts, **place("learner")).remote(
            path, settings, seed=t.seed, threads=threads, scale_advantages=t.scale_advantages,
            init_from=init_from, peers=[place("learner", r) for r in range(1, t.num_learners)]), 1, t.max_restarts)
        self.queue = ray.remote(MessageQueue).options(num_cpus=0, max_restarts=0).remote(
            t.queue_size, t.staleness_limit if t.mode == "fully_async" else 0)
        self.workers = self._infos()
        print_choices(self.workers)
        self._check_fingerprints(self.workers)
        self.versions[self.step] = int(self.workers[0]["version"])
        if self.step > 0:  # resumed: the rollouters start from the checkpoint's weights
            self._sync_weights(wait=True)

    def _infos(self) -> list[dict[str, Any]]:
        import ray

        handles = [self.learner, *self.rollouters.pool.handles, *self.reward_client.handles]
        infos = ray.get([h.info.remote() for h in handles], timeout=600)
        infos[1:1] = ray.get(self.learner.ranks.remote(), timeout=600)  # data-parallel ranks 1..N-1
        for h in self.reward_client.handles:
            infos += ray.get(h.workers.remote(), timeout=600)
        return infos

    def _check_fingerprints(self, infos: list[dict[str, Any]]) -> None:
        """Only the reward workers call rewards: their pool compared, at start-up, each reward the
        config uses with the driver's (a reward client reports the pool's refusal, naming each)."""
        for w in infos:
            if w.get("error"):
                raise RunAborted(f"reward_client on {w['hostname']} (node id {str(w['node'])[:12]}, pid "
                                 f"{w['pid']}): {w['error']}")

    # -- weights -----------------------------------------------------------------------------
    def _sync_weights(self, *, wait: bool = False) -> None:
        """Send the learner's weights to every rollouter; each acknowledgement is checked (now, or as it comes)."""
        self.rollouters.sync(self.learner.get_weights.remote(), self.step)
        self.weight_syncs += 1
        if wait:
            self.rollouters.settle()

    def _arrives_fresh(self, training: bool, ahead: int) -> bool:
        """Would a batch started now be within the staleness bound when the learner reaches it?

        Batches are consumed in order, one step each, so it is trained at version
        ``step + training + ahead``; the rollouter generates with the last synced version.
        """
        weights = self.rollouters.weights
        version = weights[1] if weights is not None else self.resumed_from or 0
        return self.step + int(training) + ahead - version <= self.t.staleness_limit

    def _next_batch(self) -> PromptBatch:
        size = self.cfg.rollout.prompts_per_step
        pairs = self.prep.dataset.batch(self.cursor, size)
        batch = PromptBatch(index=self.cursor, prompts=[p for _, p in pairs],
                            dataset_indices=[i for i, _ in pairs])
        self.cursor += 1
        return batch

    # -- bookkeeping -------------------------------------------------------------------------
    def _generated(self, rollout: Rollout) -> None:
        self.counts["generated"] += rollout.num_samples
        self.stats.busy("rollouter", rollout.gen_s)

    def _dropped(self, dropped: list[dict[str, int]]) -> None:
        for d in dropped:
            self.counts["dropped_stale"] += d["samples"]
            self.consumed = d["batch_index"] + 1
            self.stale_in_row += 1
            self.max_stale_in_row = max(self.max_stale_in_row, self.stale_in_row)
            self.stats.dropped(d, self.stale_in_row)
            limit = self.t.max_stale_batches
            if self.stale_in_row == (limit + 1) // 2:
                print(f"WARNING: dropped {self.stale_in_row} batch(es) in a row as stale "
                      f"(the run stops at {limit})", file=sys.stderr)
            if self.stale_in_row >= limit:
                raise RunAborted(
                    f"message queue: dropped {self.stale_in_row} batch(es) in a row as stale (trainer."
                    f"staleness_limit={self.t.staleness_limit}); raise trainer.staleness_limit or "
                    "trainer.max_stale_batches, or lower trainer.sync_interval")

    def _trained(self, item: Rollout, staleness: int, result: Mapping[str, float]) -> None:
        self.counts["trained"] += item.num_samples
        self.consumed = item.batch.index + 1
        self.step += 1
        self.max_staleness = max(self.max_staleness, staleness)
        self.versions[self.step] = int(result["version"])
        self.skipped_updates += int(result.get("optim/skipped_steps", 0))
        extra = {"policy_version": self.versions.get(item.version, item.version), "weights_step": item.version,
                 "stale/batches_in_a_row": self.stale_in_row}
        self.stale_in_row = 0
        metrics = self.stats.step(self.step, item, staleness, result, self._totals(),
                                  queue_size=self._queue_size, extra=extra)
        if int(result.get("optim/nonfinite_in_row", 0)) >= self.t.max_nonfinite_steps:
            raise RunAborted(
                f"learner: {int(result['optim/nonfinite_in_row'])} optimizer updates in a row skipped "
                f"(non-finite loss or gradient, step {self.step}); lower trainer.lr or check the rewards")
        every, minutes = self.t.checkpoint_every, self.t.checkpoint_minutes
        if ((every and self.step % every == 0) or self.step == self.t.total_steps
                or (minutes and time.monotonic() - self.last_checkpoint_t >= minutes * 60)):
            self._checkpoint()
        for cb in self.callbacks:
            cb(self.step, metrics, self)
        self.evaluator.after_step(self.step)

    def _totals(self) -> dict[str, int]:
        return {k: self.prior[k] + self.counts[k] for k in self.counts}

    # -- modes -------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        try:
            return self._run()
        except BaseException:
            self._stop_actors()  # a run that stops (RunAborted, Ctrl-C) leaves no process behind
            raise

    def _run(self) -> dict[str, Any]:
        from .evaluate import Evaluator

        self.evaluator = Evaluator(self)  # data.val_files: evaluations before/every test_freq/at the end
        self._start_actors()
        self.stats.start()
        self.evaluator.before_training()
        while self.step < self.t.total_steps:
            try:
                if self.t.mode == "sync":
                    self._run_sync()
                else:
                    self._run_async()
            except LearnerLost:
                self._recover()
        # the end: whatever is still in flight was generated (or will be) but not trained
        leftovers = self._collect()
        self.stats.finish()
        return self._finish(leftovers)

    def _recover(self) -> None:
        while True:  # it may die again while being restored: bounded by trainer.max_restarts
            try:
                self._restart_learner()
                return
            except LearnerLost:
                continue

    def _call(self, pool: Pool, i: int, method: str, arg: Any) -> Any:
        import ray

        while True:
            handle = pool.handles[i]
            try:
                return ray.get(getattr(handle, method).remote(arg))
            except _ACTOR_ERRORS:
                self.lost_calls[pool.role] += 1
                wait_alive(pool.failed(i), pool.role)

    def _generate(self, batch: PromptBatch) -> Rollout:
        import ray

        roll = self.rollouters
        ref = roll.submit(0, batch)
        while True:
            ray.wait([ref])
            rollout = roll.done(ref)
            if rollout is not None:
                return rollout
            ref = next(iter(roll.gen))

    def _run_sync(self) -> None:
        import ray

        f = self.flight
        while self.step < self.t.total_steps:
            t0 = time.perf_counter()
            rollout = self._generate(self._next_batch())
            self._generated(rollout)
            f.waiting.append(rollout)
            rollout = self._call(self.reward_client, 0, "score", f.waiting.pop())
            ray.get(self.queue.put.remote(rollout))
            item, dropped = ray.get(self.queue.get.remote(self.step))
            self._dropped(dropped)
            assert item is not None and not dropped, "sync mode never has stale samples"
            f.train = (None, item, 0)
            result = self._learner_call(self.learner.train.remote(item))
            f.train = None
            self.stats.busy("learner", result["train_s"])
            self.stats.busy("step", time.perf_counter() - t0)
            self._trained(item, self.step - item.version, result)
            if self.step < self.t.total_steps:
                self._sync_weights(wait=True)  # lock-step: the next batch uses the new policy

    def _run_async(self) -> None:
        import ray

        t, f, roll = self.t, self.flight, self.rollouters
        clients = range(len(self.reward_client.handles))

        def outstanding() -> int:
            return len(roll.gen) + len(f.score) + len(f.waiting) + len(f.ready) + f.queued

        while self.step < t.total_steps:
            # 1. keep the rollouters busy, within the queue bound and the batches still needed
            idle_roll = [i for i in range(t.num_rollouters) if i not in roll.busy()]
            while idle_roll and outstanding() < t.queue_size and (
                    self.step + (f.train is not None) + outstanding() < t.total_steps) and (
                    not t.staleness_gate or self._arrives_fresh(f.train is not None, outstanding())):
                roll.submit(idle_roll.pop(), self._next_batch())
            # each reward client scores one batch at a time, spread over its pool's workers
            busy_rw = {w for w, _ in f.score.values()}
            for w in clients:
                if f.waiting and w not in busy_rw:
                    item = f.waiting.pop(0)
                    f.score[self.reward_client.handles[w].score.remote(item)] = (w, item)
            # 2. move scored rollouts into the queue in batch order
            while f.next_put in f.ready:
                f.queued = ray.get(self.queue.put.remote(f.ready.pop(f.next_put)))
                f.next_put += 1
            # 3. feed the learner
            if f.train is None and f.queued:
                item, dropped = ray.get(self.queue.get.remote(self.step))
                f.queued = ray.get(self.queue.size.remote())
                self._dropped(dropped)
                if item is not None:
                    staleness = self.step - item.version
                    assert staleness <= t.staleness_limit
                    f.train = (self.learner.train.remote(item), item, staleness)
                continue  # drops may have freed room for more generation
            self._queue_size = f.queued
            refs = list(roll.gen) + list(f.score) + ([f.train[0]] if f.train else []) + list(roll.acks)
            if not refs:
                raise RuntimeError("fully_async loop stalled with nothing in flight")
            done, _ = ray.wait(refs, num_returns=1, timeout=60.0)
            for ref in done:
                if ref in roll.acks:
                    roll.acked(ref)
                elif ref in roll.gen:
                    rollout = roll.done(ref)
                    if rollout is not None:
                        self._generated(rollout)
                        f.waiting.append(rollout)
                elif ref in f.score:
                    w, item = f.score.pop(ref)
                    try:
                        scored = ray.get(ref)
                    except _ACTOR_ERRORS:
                        self.lost_calls["reward_client"] += 1
                        handle = self.reward_client.failed(w)
                        wait_alive(handle, "reward_client")
                        f.score[handle.score.remote(item)] = (w, item)
                        continue
                    f.ready[scored.batch.index] = scored
                else:
                    assert f.train is not None
                    result = self._learner_call(ref)
                    _, item, staleness = f.train
                    f.train = None
                    self.stats.busy("learner", result["train_s"])
                    self._trained(item, staleness, result)
                    weights = roll.weights
                    synced = weights[1] if weights is not None else self.resumed_from or 0
                    # sync every sync_interval steps, and whenever the rollouters' weights are so old
                    # that everything they generate would be dropped (else the run could not progress)
                    if self.step < t.total_steps and (self.step % t.sync_interval == 0
                                                      or self.step - synced > t.staleness_limit):
                        self._sync_weights()

    def _collect(self) -> list[Rollout]:
        """Everything generated and not trained, once the calls in flight are in (counted as generated)."""
        import ray

        f = self.flight
        out = self.rollouters.collect()
        for rollout in out:
            self._generated(rollout)
        for ref, (_, item) in f.score.items():
            out.append(item)
            try:
                ray.get(ref)
            except Exception:  # noqa: BLE001 - its samples are counted either way
                pass
        out += f.waiting + list(f.ready.values())
        if f.train is not None:
            out.append(f.train[1])
            if f.train[0] is not None:
                try:
                    ray.get(f.train[0])
                except Exception:  # noqa: BLE001 - its samples are counted either way
                    pass
        out += ray.get(self.queue.drain.remote())
        self._reset_flight()
        return out

    def _reset_flight(self) -> None:
        self.flight = _Flight(next_put=self.cursor)

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
            "samples_lost_on_restart": totals["lost_on_restart"],
            "accounting_exact": totals["generated"] == (totals["trained"] + totals["dropped_stale"] + unused
                                                        + totals["lost_on_restart"]),
            "max_staleness_seen": self.max_staleness,
            "max_stale_batches_in_a_row": self.max_stale_in_row,
            "staleness_limit": self.t.staleness_limit if self.t.mode == "fully_async" else 0,
            "sync_interval": self.t.sync_interval if self.t.mode == "fully_async" else 1,
            "steps": self.step,
            "total_steps": self.t.total_steps,
            "policy_version": self.versions.get(self.step),
            "skipped_updates": self.skipped_updates,
            "resumed_from_step": self.resumed_from,
            "learner_restores": self.learner_restores,
            "weight_syncs": self.weight_syncs,
            "weight_sync_failures": self.rollouters.sync_failures,
            "driver_pid": os.getpid(),
            "driver_fingerprint": self.prep.fingerprint,
            "rewards": provenance(self.cfg.reward, workers),
            "workers": [{**{k: w.get(k) for k in ("role", "node", "pid", "registry_fingerprint")},
                         **{k: w[k] for k in ("pool", "rank", "gpu_ids", "device", "dtype") if k in w}} for w in workers],
            "devices": devices_summary(workers),
            "resources": self.cfg.resources.to_dict(),
            "restarts": {"rollouter": self.rollouters.pool.restarts, "reward_client": self.reward_client.restarts,
                         "reward_worker": counters["restarts"], "learner": self.learner_restarts},
            "recreated": {"rollouter": self.rollouters.pool.recreated,
                          "reward_client": self.reward_client.recreated, "learner": self.learners.recreated},
            "rescored_samples": counters["rescored_samples"],
            "lost_calls": {**self.lost_calls, "rollouter": self.rollouters.lost_calls},
            "reward_pids": sorted(self.stats.reward_pids),
            "model_path": self.prep.model_path,
            "data": dict(self.prep.data_report),
            **self.evaluator.summary(),
            **self.stats.summary(),
        }
        self._stop_actors()
        (self.out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
        return summary

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
        for pool in (getattr(self, "learners", None), clients, getattr(getattr(self, "rollouters", None), "pool", None)):
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
