"""Resources asked are resources used: the ``resources:`` section, placement groups, the plan.

The section and what each role asks are in the README ("Resources and placement"). Every learner,
rollouter and the evaluator that asks for something gets a bundle of one placement group (strategy from
``placement``), so each actor sees only the GPUs Ray gave it (every actor starts with
:data:`~rewardhub_trainer.devices.NO_GPU_ENV`); the reward workers are placed by their
:class:`~rewardhub.distributed.RewardWorkerPool`. :func:`plan` is pure (no Ray): it simulates the
placement on a list of nodes, for the check before the group is created and for ``rewardhub doctor``.
Nothing here imports Ray at import time.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections import Counter
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from typing import Any

from rewardhub.config.fields import Rule
from rewardhub.config.fields import at_least
from rewardhub.config.fields import check_section
from rewardhub.config.fields import invalid
from rewardhub.config.fields import one_of
from rewardhub.errors import UsageError

from .devices import NO_GPU_ENV

__all__ = [
    "PLACEMENTS",
    "RULES",
    "Bundle",
    "Placement",
    "Resources",
    "RoleResources",
    "bundles",
    "cluster_check",
    "parse_resources",
    "plan",
]

PLACEMENTS = ("pack", "spread", "strict_pack", "strict_spread")
ROLES = ("learner", "rollouter", "reward_worker", "evaluator")


@dataclass(frozen=True)
class RoleResources:
    """What each actor of a role asks Ray for: CPUs, GPUs and custom resources (``resources``, the
    key ``reward.workers.resources`` uses too: ``{name: amount}``, declared by nodes with
    ``ray start --resources='{"name": N}'``)."""

    num_cpus: float = 0.0
    num_gpus: float = 0.0
    resources: dict[str, float] = field(default_factory=dict)

    def as_ray(self) -> dict[str, float]:
        asked = {"CPU": self.num_cpus, "GPU": self.num_gpus, **self.resources}
        return {k: v for k, v in asked.items() if v > 0}


@dataclass(frozen=True)
class Resources:
    placement: str = "pack"
    learner: RoleResources = field(default_factory=RoleResources)
    rollouter: RoleResources = field(default_factory=RoleResources)
    reward_worker: RoleResources | None = None  #: None: reward.workers.num_cpus / num_gpus / resources
    evaluator: RoleResources | None = None  #: None: the rollouter's entry (it generates as a rollouter does)
    nnodes: int = 0  #: 0: any cluster
    gpus_per_node: int = 0

    def to_dict(self) -> dict[str, Any]:
        """As plain data (a role's ``resources`` only where it asks for custom ones)."""
        out = dataclasses.asdict(self)
        if out["evaluator"] is None:
            del out["evaluator"]  # the shape as before: the rollouter's entry
        for role in ROLES:
            if out.get(role) is not None and not out[role]["resources"]:
                del out[role]["resources"]
        return out


#: field path in ``resources:`` -> what its value may be (beyond its type), for the one validator
RULES: dict[str, Rule] = {
    "placement": one_of(*PLACEMENTS),
    **{f"{role}.{k}": at_least(0) for role in ROLES for k in ("num_cpus", "num_gpus")},
    **{f"{role}.resources.*": at_least(0) for role in ROLES},
    "nnodes": at_least(0),
    "gpus_per_node": at_least(0),
}


def _role(raw: Mapping[str, Any] | None, key: str) -> RoleResources | None:
    if raw is None:
        return None
    custom = dict(raw.get("resources") or {})
    for name, amount in custom.items():
        if name in ("CPU", "GPU"):
            raise invalid(f"{key}.resources.{name}", amount, f"set {key}.num_{name.lower()}s instead",
                          "CPUs and GPUs have keys of their own")
        if not isinstance(amount, str) and amount < 0:
            raise invalid(f"{key}.resources.{name}", amount, "allowed: a value >= 0")
    return RoleResources(**{**raw, "resources": custom})


def parse_resources(raw: Any) -> Resources:
    """The ``resources:`` section (a mapping, or None) as :class:`Resources`.

    :raises UsageError: naming the key and the fix, in the one wording of :mod:`rewardhub.config.fields`.
    """
    values = check_section(raw, Resources, "resources", RULES)
    for role in ROLES:
        if role in values:
            values[role] = _role(values[role], f"resources.{role}")
    return Resources(**values)


@dataclass(frozen=True)
class Bundle:
    role: str
    index: int
    needs: Mapping[str, float]

    @property
    def name(self) -> str:
        return f"{self.role} {self.index}"


def bundles(res: Resources, num_rollouters: int, num_learners: int = 1, evaluators: int = 0) -> list[Bundle]:
    """The placement group's bundles: each learner rank, each rollouter, then the evaluator (``evaluators``:
    1 with a validation set), when they ask for anything."""
    evaluator = res.evaluator if res.evaluator is not None else res.rollouter
    roles = (("learner", res.learner, num_learners), ("rollouter", res.rollouter, num_rollouters),
             ("evaluator", evaluator, evaluators))
    return [Bundle(role, i, asks.as_ray()) for role, asks, count in roles if asks.as_ray()
            for i in range(count)]


def _node_resources(node: Mapping[str, Any]) -> dict[str, float]:
    """A node's CPUs, GPUs and custom resources (not Ray's own: memory, ``node:<ip>``, accelerator type)."""
    return {
        k: float(v)
        for k, v in (node.get("Resources") or {}).items()
        if k not in ("memory", "object_store_memory") and not k.startswith(("node:", "accelerator_type:"))
    }


def _describe_nodes(nodes: Sequence[Mapping[str, Any]]) -> str:
    return "\n".join(f"  node {n.get('NodeManagerAddress', '?')} (id {str(n.get('NodeID', '?'))[:12]}): "
                     + (", ".join(f"{k}={v:g}" for k, v in sorted(_node_resources(n).items())) or "nothing")
                     for n in nodes)


def plan(items: Sequence[Bundle], nodes: Sequence[Mapping[str, Any]], placement: str = "pack") -> list[str]:
    """Simulate the placement: the node id of each bundle, or :class:`UsageError` saying what is missing.

    ``nodes`` are ``ray.nodes()`` entries (alive ones are used, with their total ``Resources``).
    ``pack`` fills as few nodes as possible, ``spread`` takes the least-used node that fits; the
    ``strict_`` forms fail where Ray's would (all on one node; each on a different node).
    """
    alive = [n for n in nodes if n.get("Alive", True)]
    free = {str(n["NodeID"]): _node_resources(n) for n in alive}
    order = list(free)
    total_asked: Counter[str] = sum((Counter(b.needs) for b in items), Counter())  # needs are all > 0
    total_have = {k: sum(f.get(k, 0.0) for f in free.values()) for k in total_asked}

    def fits(node: str, b: Bundle) -> bool:
        return all(free[node].get(k, 0.0) >= v - 1e-9 for k, v in b.needs.items())

    def fail(why: str) -> UsageError:
        asked = ", ".join(f"{b.name}: " + ", ".join(f"{k}={v:g}" for k, v in b.needs.items()) for b in items)
        return UsageError(f"resources: the cluster cannot place the run ({placement}): {why}\n"
                          f"asked: {asked}\nthe cluster:\n{_describe_nodes(alive)}\n"
                          "lower resources.<role>.num_gpus / num_cpus / resources, trainer.num_rollouters or "
                          "trainer.num_learners, "
                          "choose another "
                          "resources.placement, or add nodes")

    short = {k: (v, total_have[k]) for k, v in total_asked.items() if v > total_have[k] + 1e-9}
    if short:
        raise fail(
            "; ".join(f"{v:g} {k} asked in all, the cluster has {have:g}" for k, (v, have) in short.items())
        )
    where: list[str] = []
    used: dict[str, int] = {n: 0 for n in order}
    if placement == "strict_pack":
        on_one = (n for n in order if all(v <= free[n].get(k, 0.0) + 1e-9 for k, v in total_asked.items()))
        node = next(on_one, None)
        if node is None:
            raise fail("strict_pack needs every bundle on one node, and no node has all of it")
        return [node] * len(items)
    # spread: the least-used node that fits first, pack: the most-used; ties in node order (a stable sort)
    fewest = 1 if placement == "spread" else -1
    for b in items:
        if placement == "strict_spread":
            candidates = [n for n in order if used[n] == 0 and fits(n, b)]
        else:
            candidates = sorted((n for n in order if fits(n, b)), key=lambda n: fewest * used[n])
        if not candidates:
            raise fail(
                f"no node has room for {b.name} ({', '.join(f'{k}={v:g}' for k, v in b.needs.items())})"
                + (" on a node of its own" if placement == "strict_spread" else "")
            )
        node = candidates[0]
        for k, v in b.needs.items():
            free[node][k] = free[node].get(k, 0.0) - v
        used[node] += 1
        where.append(node)
    return where


def cluster_check(res: Resources, nodes: Sequence[Mapping[str, Any]]) -> list[str]:
    """The cluster-wide problems of ``res`` on ``nodes``: too few alive nodes, too few with enough GPUs."""
    alive = [n for n in nodes if n.get("Alive", True)]
    problems = []
    if res.nnodes and len(alive) < res.nnodes:
        problems.append(f"resources.nnodes={res.nnodes} but the cluster has {len(alive)} alive node(s)")
    if res.gpus_per_node:
        gpu_nodes = [n for n in alive if _node_resources(n).get("GPU", 0.0) >= res.gpus_per_node]
        want = res.nnodes or 1
        if len(gpu_nodes) < want:
            problems.append(f"resources.gpus_per_node={res.gpus_per_node} on {want} node(s), but "
                            f"{len(gpu_nodes)} node(s) have that many GPUs")
    return problems


class Placement:
    """The run's placement group (when a learner or rollouter asks for resources) and actor options.

    :raises UsageError: before anything is created, when the cluster lacks what is asked; and when
        Ray cannot place the group within ``timeout_s``.
    """

    def __init__(self, res: Resources, num_rollouters: int, num_learners: int = 1, *, evaluators: int = 0,
                 timeout_s: float = 60.0) -> None:
        import ray

        self.res = res
        self.items = bundles(res, num_rollouters, num_learners, evaluators)
        self.groups: list[Any] = []
        self.slots: list[tuple[Any, int]] = []  #: one (placement group, bundle index) per item
        self.expected: list[str] = []  #: the planned node of each item (Ray may pick other, equivalent ones)
        nodes = ray.nodes()
        problems = cluster_check(res, nodes)
        if problems:
            raise UsageError("resources: " + "; ".join(problems) + "\nthe cluster:\n"
                             + _describe_nodes([n for n in nodes if n.get("Alive")])
                             + "\nstart the run on a cluster that has them, or change resources.nnodes / "
                               "gpus_per_node (verl: trainer.nnodes / trainer.n_gpus_per_node)")
        if not self.items:
            return
        self.expected = plan(self.items, nodes, res.placement)
        from ray.util.placement_group import placement_group

        for strategy, chunk in _groups(self.items, nodes, res.placement):
            group = placement_group([dict(b.needs) for b in chunk], strategy=strategy)
            self.groups.append(group)
            self.slots += [(group, i) for i in range(len(chunk))]
        try:
            ray.get([g.ready() for g in self.groups], timeout=timeout_s)
        except Exception as exc:  # noqa: BLE001 - GetTimeoutError, or the group was rejected
            self.remove()
            raise UsageError(
                f"resources: Ray did not place the run's placement group ({res.placement}) within "
                f"{timeout_s:g}s ({type(exc).__name__}); the resources are taken by other jobs, or "
                f"the cluster lacks them\nthe cluster:\n{_describe_nodes(ray.nodes())}"
            ) from None

    def options(self, role: str, index: int = 0) -> dict[str, Any]:
        """Ray actor options for ``role``'s actor ``index``: its CPUs, GPUs and custom resources, in its
        bundle, and Ray's switch that gives an actor without GPUs ``CUDA_VISIBLE_DEVICES=""``
        (:data:`~.devices.NO_GPU_ENV`)."""
        for b, (group, i) in zip(self.items, self.slots):
            if b.role == role and b.index == index:
                from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

                custom = {k: v for k, v in b.needs.items() if k not in ("CPU", "GPU")}
                return {"num_cpus": b.needs.get("CPU", 0.0), "num_gpus": b.needs.get("GPU", 0.0),
                        **({"resources": custom} if custom else {}), "runtime_env": NO_GPU_ENV,
                        "scheduling_strategy": PlacementGroupSchedulingStrategy(
                            placement_group=group, placement_group_bundle_index=i)}
        return {"num_cpus": 0, "runtime_env": NO_GPU_ENV}

    def remove(self) -> None:
        from ray.util.placement_group import remove_placement_group

        for group in self.groups:
            with contextlib.suppress(Exception):  # gone with the cluster
                remove_placement_group(group)
        self.groups, self.slots = [], []


def _groups(
    items: Sequence[Bundle], nodes: Sequence[Mapping[str, Any]], placement: str
) -> list[tuple[str, list[Bundle]]]:
    """The placement groups to create: ``(Ray strategy, bundles)``.

    Ray's ``SPREAD`` is best effort (two bundles may share a node while another is free), so
    ``spread`` becomes consecutive ``STRICT_SPREAD`` groups of one bundle per fitting node (round
    robin, each node taking the same share) when every such node can hold its share; else ``SPREAD``.
    """
    if placement != "spread":
        return [(placement.upper(), list(items))]
    keys = {k for b in items for k in b.needs}
    biggest = {k: max(b.needs.get(k, 0.0) for b in items) for k in keys}
    fitting = [n for n in nodes if n.get("Alive", True)
               and all(_node_resources(n).get(k, 0.0) >= v for k, v in biggest.items())]
    width = len(fitting)
    if width >= 2:
        share = -(-len(items) // width)
        if all(_node_resources(n).get(k, 0.0) >= share * v for n in fitting for k, v in biggest.items()):
            return [("STRICT_SPREAD", list(items[i:i + width])) for i in range(0, len(items), width)]
    return [("SPREAD", list(items))]
