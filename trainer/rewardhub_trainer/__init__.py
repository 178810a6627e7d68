"""rewardhub-trainer: a GRPO trainer on Ray whose rewards come from the rewardhub registry.

Modules: :mod:`.config` (schema), :mod:`.engine` (generation), :mod:`.learner` (GRPO math and
learner), :mod:`.actors` (Ray actors), :mod:`.loop` (sync and fully-async orchestration),
:mod:`.data`, :mod:`.models`, :mod:`.cli`, :mod:`.plot`. Importing this package imports neither
Ray nor torch.
"""

from __future__ import annotations

__all__ = ["__version__"]


def __getattr__(name: str) -> str:
    if name == "__version__":
        from importlib.metadata import version

        return version("rewardhub-trainer")
    raise AttributeError(name)
