"""The cluster preflight behind ``rewardhub doctor``: one probe per alive node, one line per pool."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..config.schema import RewardConfig
from ._errors import describe_problem
from ._ray import ensure_ray
from ._reward_worker import probe
from ._setup import prepare_setup

__all__ = ["check_cluster", "configured_pools"]

_MISSING = ("missing", "file_missing")
_MISMATCHED = ("version", "target", "file_hash", "mismatched")


def configured_pools(cfg: RewardConfig) -> list[dict[str, Any]]:
    """The resource pools a config asks for: name and what each of its workers needs."""
    pools = []
    w = cfg.workers
    needs = {"CPU": float(w.num_cpus or 0), "GPU": float(w.num_gpus or 0),
             **{str(k): float(v) for k, v in w.resources.items()}}
    pools.append({"pool": w.pool or "reward", "needs": {k: v for k, v in needs.items() if v > 0}})
    rm = cfg.reward_model
    if rm.enable:
        gpus = float(rm.n_gpus_per_node or 0)
        pools.append({"pool": rm.pool or "reward_model", "needs": {"GPU": gpus} if gpus else {}})
    return pools


def _node_report(
    node: Mapping[str, Any], info: Mapping[str, Any], pools: list[dict[str, Any]]
) -> dict[str, Any]:
    problems = list(info.get("problems") or ())
    have = node.get("Resources") or {}
    resources = {k: v for k, v in have.items()
                 if not k.startswith(("node:", "memory", "object_store_memory"))}
    return {
        "node": node["NodeID"], "node_id": node["NodeID"], "ip": node.get("NodeManagerAddress"),
        "hostname": info.get("hostname") or node.get("NodeManagerHostname"), "pid": info.get("pid"),
        "is_head": "node:__internal_head__" in have,
        "fingerprint": info.get("fingerprint"),
        "missing": sorted(str(p["reward"]) for p in problems if p.get("kind") in _MISSING),
        "mismatched": [{k: p.get(k) for k in ("reward", "kind", "driver", "worker")}
                       for p in problems if p.get("kind") in _MISMATCHED],
        "broken": [{"reward": p.get("reward"), "detail": p.get("detail")} for p in problems
                   if p.get("kind") == "broken"],
        "problems": [describe_problem(p) for p in problems],
        # differences in rewards the config does not use (every reward, without a config): warnings
        "warnings": [describe_problem(p) for p in info.get("notes") or ()],
        "warned_rewards": sorted({str(p["reward"]) for p in info.get("notes") or () if p.get("reward")}),
        "pools": [p["pool"] for p in pools if all(have.get(k, 0.0) >= v for k, v in p["needs"].items())],
        "files": dict(info.get("files") or {}), "resources": resources, "ok": not problems,
    }


def check_cluster(reward_cfg: Any = None, *, address: str | None = None, ship_files: bool = True,
                  strict: bool = False, timeout_s: float = 180.0) -> dict[str, Any]:
    """On every alive node, build the registry, resolve every reward the config names, compare.

    Every reward of the driver's registry is compared on every node. A difference in a reward the
    config uses is a problem (``ok`` is false); in any other reward it is a warning (every reward,
    when no config names one), unless ``strict``.
    Starts a local Ray when none is running and ``address`` is not given.

    :param reward_cfg: a loaded plan's :class:`~rewardhub.config.schema.RewardConfig` (taken as it is), or
        a raw section (validated here).
    :returns: ``{"fingerprint", "rewards", "nodes": [...], "pools": [...], "ok"}``.
    """
    setup, registry = prepare_setup(reward_cfg or {}, ship_files=ship_files, strict=strict)
    ray, started = ensure_ray(address or setup.reward_cfg.workers.address)
    try:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        nodes = sorted((n for n in ray.nodes() if n.get("Alive")), key=lambda n: n["NodeID"])
        pools = configured_pools(setup.reward_cfg)
        remote = ray.remote(num_cpus=0, max_retries=0)(probe)
        ref = ray.put(setup)
        refs = [remote.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False))
                .remote(ref) for n in nodes]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
        reports = []
        for node, r in zip(nodes, refs):
            if r not in ready:
                ray.cancel(r, force=True)
                info: dict[str, Any] = {"problems": [{"kind": "error", "detail": f"probe did not finish in "
                                                                                 f"{timeout_s:g}s"}]}
            else:
                try:
                    info = ray.get(r)
                except Exception as exc:  # noqa: BLE001 - a node that cannot run the probe
                    info = {"problems": [{"kind": "error", "detail": f"{type(exc).__name__}: "
                                                                     f"{str(exc).strip().splitlines()[0]}"}]}
            reports.append(_node_report(node, info, pools))
        pool_reports = []
        for p in pools:
            where = [r["node_id"] for r in reports if p["pool"] in r["pools"]]
            pool_reports.append({**p, "nodes": where, "ok": bool(where) and all(
                r["ok"] for r in reports if r["node_id"] in where)})
        return {"fingerprint": setup.driver_fingerprint, "rewards": list(setup.used),
                "registry_size": len(registry), "nodes": reports, "pools": pool_reports,
                "ok": bool(reports) and all(r["ok"] for r in reports) and all(p["ok"] for p in pool_reports)}
    finally:
        if started:
            ray.shutdown()
