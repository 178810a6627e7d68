"""Ray for the reward workers: connecting (or starting a local Ray), and which errors mean a dead actor."""

from __future__ import annotations

from typing import Any

__all__ = ["actor_errors", "ensure_ray", "short_error"]


def ensure_ray(address: str | None = None) -> tuple[Any, bool]:
    """Connect to Ray (``address``), or start a local Ray; returns (ray, whether we started it)."""
    import ray

    if ray.is_initialized():
        return ray, False
    opts: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
    ray.init(address=address, **opts) if address else ray.init(**opts)
    return ray, True


def actor_errors() -> tuple[type[BaseException], ...]:
    from ray import exceptions as rex

    return tuple(getattr(rex, n) for n in ("RayActorError", "WorkerCrashedError", "ObjectLostError",
                                           "RuntimeEnvSetupError") if hasattr(rex, n))


def short_error(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]
