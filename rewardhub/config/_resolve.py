"""Config nodes resolved to plain containers, an interpolation that cannot resolve explained in one line."""

from __future__ import annotations

from typing import Any

from ..errors import UsageError

__all__ = ["resolve_or_explain"]


def resolve_or_explain(node: Any, where: str) -> Any:
    """``node`` resolved to plain containers; an interpolation that cannot resolve (an environment
    variable a launch script uses but nobody set) is a one-line error naming the key and the fix."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None) or "?"
        key = key if key.startswith(where) else f"{where}.{key}"
        import re

        env = re.search(r"Environment variable '(\w+)' not found", str(exc))
        if env:
            name = env.group(1)
            raise UsageError(
                f"{key} uses ${name}, which is not set\n"
                f"export {name}=... before running, or set it in the script ({name}=...)"
            ) from None
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UsageError(f"{key} cannot be resolved: {msg}") from None
