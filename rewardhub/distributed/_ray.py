"""Ray for the core and the trainer: starting or joining Ray, where this process runs, and which errors
mean a dead actor."""

from __future__ import annotations

import os
import socket
from typing import Any

__all__ = ["actor_errors", "ensure_ray", "process_location", "short_error"]


def ensure_ray(address: str | None = None, *, num_cpus: int | None = None) -> tuple[Any, bool]:
    """Join the Ray that is running in this process, else the cluster at ``address`` (else at
    ``RAY_ADDRESS``), else start a local Ray of our own (never a cluster another process started on
    this machine); returns (ray, whether we started or joined it here). An address where nothing
    listens is one :class:`~rewardhub.errors.RewardhubError` at once
    (:func:`rewardhub._netprobe.probe_ray_address`).

    :param num_cpus: the CPUs a local Ray gets (Ray's default: this machine's); ignored when joining.
    """
    from .._extras import require

    ray = require("ray", "a Ray reward pool (executor: ray, reward.workers, doctor)")

    if ray.is_initialized():
        return ray, False
    flag = "reward.workers.address" if address else "RAY_ADDRESS"
    address = address or os.environ.get("RAY_ADDRESS") or None
    opts: dict[str, Any] = {"log_to_driver": False, "configure_logging": False}
    if address:
        from .._netprobe import probe_ray_address

        # where nothing listens, Ray retries for minutes, printing a line every few seconds
        probe_ray_address(address, flag=flag)
        ray.init(address=address, **opts)
    else:
        ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, **opts)
    return ray, True


def process_location() -> dict[str, Any]:
    """Where this process runs and what it sees, as every actor's ``info()`` reports it.

    ``node_id`` (Ray's node id; ``None`` outside Ray), ``node`` (the node id, else the hostname),
    ``ip`` (the node's IP, else the hostname), ``hostname``, ``pid``, ``gpu_ids`` (the GPUs Ray gave
    this process) and ``cuda_visible`` (``CUDA_VISIBLE_DEVICES``; ``None`` when unset).
    """
    host = socket.gethostname()
    node_id, ip, gpu_ids = None, None, []
    try:
        import ray

        if ray.is_initialized():
            context = ray.get_runtime_context()
            node_id = context.get_node_id()
            ip = ray.util.get_node_ip_address()
            gpu_ids = [str(g) for g in context.get_accelerator_ids().get("GPU", [])]
    except Exception:  # noqa: BLE001 - outside Ray or an old Ray
        pass
    return {"node_id": node_id, "node": node_id or host, "ip": ip or host, "hostname": host,
            "pid": os.getpid(), "gpu_ids": gpu_ids, "cuda_visible": os.environ.get("CUDA_VISIBLE_DEVICES")}


def actor_errors() -> tuple[type[BaseException], ...]:
    from ray import exceptions as rex

    return tuple(getattr(rex, n) for n in ("RayActorError", "WorkerCrashedError", "ObjectLostError",
                                           "RuntimeEnvSetupError") if hasattr(rex, n))


def short_error(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]
