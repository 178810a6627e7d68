"""The pluggy plugin: registers one reward spec per reasoning-gym dataset, without importing it."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

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


def _versions(*dists: str) -> dict[str, str]:
    """The installed version of each of ``dists``: from the name of its ``.dist-info`` folder, the
    first on ``sys.path`` (as the import system would find it), else ``importlib.metadata`` (not
    imported otherwise: it pulls in the email package, a tenth of ``rewardhub list``'s start-up).
    One listing of each ``sys.path`` folder serves every dist."""
    prefixes = {dist: dist.replace("-", "_").lower() + "-" for dist in dists}
    found: dict[str, str] = {}
    for entry in sys.path:
        if len(found) == len(prefixes):
            break
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for dist, prefix in prefixes.items():
            if dist in found:
                continue
            for name in names:
                if name.endswith(".dist-info") and name.lower().startswith(prefix):
                    found[dist] = name[len(prefix):-len(".dist-info")]
                    break
    missing = [d for d in dists if d not in found]
    if missing:
        import importlib.metadata

        found.update((d, importlib.metadata.version(d)) for d in missing)
    return found


def dataset_names(version: str | None = None) -> list[str]:
    """The dataset names of the installed reasoning-gym (shipped list, else a cached one); ``version``:
    the installed reasoning-gym's, when the caller has read it already."""
    version = version or _versions("reasoning-gym")["reasoning-gym"]
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
    versions = _versions("rewardhub-reasoning-gym", "reasoning-gym")
    common: dict[str, Any] = dict(source="plugin", dist="rewardhub-reasoning-gym", plugin="reasoning_gym",
                                  version=versions["rewardhub-reasoning-gym"], policy=_POLICY, target=_TARGET)
    return [RewardSpec(name="reasoning_gym", summary="reasoning-gym score_answer of the dataset named by the "
                       "sample's data_source", **common)] + [
        RewardSpec(name=f"reasoning_gym.{name}", params=(("dataset", name),), data_sources=(
            name, f"reasoning_gym/{name}"), summary=f"reasoning-gym {name!r} score_answer", **common)
        for name in dataset_names(versions["reasoning-gym"])]
