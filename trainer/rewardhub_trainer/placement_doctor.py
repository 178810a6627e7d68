"""What ``rewardhub doctor`` says about a training config's pools: where each learner, rollouter and the
evaluator would go on the cluster's nodes (:func:`~rewardhub_trainer.placement.plan`), what the reward
workers ask for, and the cluster-wide checks (``resources.nnodes``, ``resources.gpus_per_node``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from rewardhub.errors import UsageError

from .placement import Resources
from .placement import RoleResources
from .placement import bundles
from .placement import cluster_check
from .placement import parse_resources
from .placement import plan

__all__ = ["doctor_lines", "plan_report"]


def plan_report(res: Resources, num_rollouters: int, nodes: Sequence[Mapping[str, Any]],
                reward_worker: Mapping[str, float] | None = None, num_reward_workers: int = 1,
                num_learners: int = 1, evaluators: int = 0) -> list[str]:
    """Lines for ``rewardhub doctor``: what each trainer pool would get on ``nodes`` (or the error)."""
    lines = []
    items = bundles(res, num_rollouters, num_learners, evaluators)
    try:
        where = plan(items, nodes, res.placement)
    except UsageError as exc:
        return [f"trainer pools: PROBLEM: {str(exc).splitlines()[0]}"]
    for b, node in zip(items, where):
        lines.append(f"{b.name}: " + ", ".join(f"{k}={v:g}" for k, v in b.needs.items())
                     + f" on node {node[:12]} ({res.placement})")
    for role, count in (("learner", num_learners), ("rollouter", num_rollouters)):
        if count and not getattr(res, role).as_ray():
            lines.append(f"{role}" + (f" x{count}" if count > 1 else "")
                         + ": asks for nothing (0 CPUs, 0 GPUs): any node, shares the CPUs")
    if reward_worker is not None:
        needs = ", ".join(f"{k}={v:g}" for k, v in reward_worker.items() if v) or "nothing"
        lines.append(f"reward_worker x{num_reward_workers}: {needs} each")
    lines += cluster_check(res, nodes)
    return lines


def doctor_lines(cfg: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]]) -> list[str]:
    """``rewardhub doctor``'s lines for a training config; ``nodes`` are its report's nodes."""
    from rewardhub.config.loader import resolve_or_explain

    raw = resolve_or_explain(cfg, "config")
    try:
        res = parse_resources(raw.get("resources"))
    except UsageError as exc:
        return [f"trainer pools: PROBLEM: {str(exc).splitlines()[0]}"]
    trainer = raw.get("trainer") or {}
    tp = (raw.get("rollout") or {}).get("tensor_parallel_size") or 1
    # as the trainer's config does: each engine's GPUs
    if isinstance(tp, int) and tp > 1 and not res.rollouter.num_gpus:
        res = dataclasses.replace(res, rollouter=dataclasses.replace(res.rollouter, num_gpus=float(tp)))
    workers = (raw.get("reward") or {}).get("workers") or {}
    rw = res.reward_worker or RoleResources(
        float(workers.get("num_cpus", 1.0)),
        float(workers.get("num_gpus", 0.0)),
        dict(workers.get("resources") or {}),
    )
    count = int(workers.get("num_workers") or trainer.get("num_reward_workers") or 1)
    as_ray = [{"NodeID": n.get("node_id"), "NodeManagerAddress": n.get("ip"), "Alive": True,
               "Resources": n.get("resources") or {}} for n in nodes]
    lines = plan_report(
        res,
        int(trainer.get("num_rollouters") or 1),
        as_ray,
        {"CPU": rw.num_cpus, "GPU": rw.num_gpus, **rw.resources},
        count,
        int(trainer.get("num_learners") or 1),
        1 if (raw.get("data") or {}).get("val_files") else 0,
    )
    return ["trainer pools (resources:):", *(f"  {line}" for line in lines)]
