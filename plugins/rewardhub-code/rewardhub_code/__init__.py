"""rewardhub-code: the ``code_tests`` and ``code_io`` rewards, and the local sandbox they run code in."""

from __future__ import annotations

__all__ = ["code_io", "code_tests", "isolation_report", "run_python", "RunResult", "SandboxLimits"]


def __getattr__(name: str) -> object:
    # lazy: listing the registry must not import the reward module
    if name in ("code_io", "code_tests"):
        from . import reward

        return getattr(reward, name)
    if name in ("isolation_report", "run_python", "RunResult", "SandboxLimits"):
        from . import sandbox

        return getattr(sandbox, name)
    raise AttributeError(f"module 'rewardhub_code' has no attribute {name!r}")
