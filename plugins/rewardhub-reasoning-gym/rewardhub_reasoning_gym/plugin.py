"""The pluggy plugin: registers one reward spec per reasoning-gym dataset, without importing it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from rewardhub import RewardSpec
from rewardhub import hookimpl
from rewardhub.types import ExecutionPolicy

__all__ = ["dataset_names", "rewardhub_register_rewards"]

_HERE = Path(__file__).parent
_TARGET = "rewardhub_reasoning_gym.scoring:score"
_POLICY = ExecutionPolicy(executor="inline", timeout_s=None)


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rewardhub"


def _version(dist: str) -> str:
    """The installed version of ``dist``: from the name of its ``.dist-info`` folder, the first on
    ``sys.path`` (as the import system would find it), else ``importlib.metadata`` (not imported
    otherwise: it pulls in the email package, a tenth of ``rewardhub list``'s start-up)."""
    prefix = dist.replace("-", "_").lower() + "-"
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            if name.endswith(".dist-info") and name.lower().startswith(prefix):
                return name[len(prefix):-len(".dist-info")]
    import importlib.metadata

    return importlib.metadata.version(dist)


def dataset_names() -> list[str]:
    """The dataset names of the installed reasoning-gym (shipped list, else a cached one)."""
    version = _version("reasoning-gym")
    for path in (_HERE / f"datasets-{version}.txt", _cache_dir() / f"reasoning-gym-{version}.txt"):
        if path.is_file():
            return [n for n in path.read_text().split() if n]
    import reasoning_gym  # not shipped for this version: compute once, then cache

    names = sorted(reasoning_gym.factory.DATASETS)
    try:
        cache = _cache_dir()
        cache.mkdir(parents=True, exist_ok=True)
        tmp = cache / f".reasoning-gym-{version}.{os.getpid()}"
        tmp.write_text("\n".join(names) + "\n")
        tmp.replace(cache / f"reasoning-gym-{version}.txt")
    except OSError:
        pass
    return names


@hookimpl
def rewardhub_register_rewards() -> list[RewardSpec]:
    version = _version("rewardhub-reasoning-gym")
    common = dict(source="plugin", dist="rewardhub-reasoning-gym", version=version,
                  plugin="reasoning_gym", policy=_POLICY)
    specs = [
        RewardSpec(
            name="reasoning_gym",
            target=_TARGET,
            summary="reasoning-gym score_answer of the dataset named by the sample's data_source",
            **common,  # type: ignore[arg-type]
        )
    ]
    for name in dataset_names():
        specs.append(
            RewardSpec(
                name=f"reasoning_gym.{name}",
                target=_TARGET,
                params=(("dataset", name),),
                data_sources=(name, f"reasoning_gym/{name}"),
                summary=f"reasoning-gym {name!r} score_answer",
                **common,  # type: ignore[arg-type]
            )
        )
    return specs
