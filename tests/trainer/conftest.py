"""Fixtures of the trainer's tests: one local Ray for the whole session, the tiny model's config."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "ray: starts (or uses) the session's local Ray")


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny models are built once per session into a private cache."""
    cache = tmp_path_factory.mktemp("rewardhub-cache")
    old = os.environ.get("REWARDHUB_CACHE")
    os.environ["REWARDHUB_CACHE"] = str(cache)
    yield cache
    if old is None:
        os.environ.pop("REWARDHUB_CACHE", None)
    else:
        os.environ["REWARDHUB_CACHE"] = old


@pytest.fixture(scope="module")
def ray_session(model_cache: Path, session_ray):
    """The shared local Ray (see the root conftest's ``session_ray``), started after the model cache is
    set (its workers inherit it)."""
    return session_ray


def write_tiny_config(folder: Path, **sections: dict | None) -> str:
    """Write a small variant of examples/tiny.yaml into ``folder``, each section of ``sections``
    updated (``None`` drops it); returns its path."""
    cfg = yaml.safe_load((EXAMPLES / "tiny.yaml").read_text())
    cfg["trainer"].update(total_steps=6, checkpoint_every=0)
    cfg["rollout"].update(n=4, prompts_per_step=2, max_new_tokens=8)
    for name, values in sections.items():
        if values is None:
            cfg.pop(name, None)
        else:
            cfg.setdefault(name, {}).update(values)
    path = folder / f"config-{len(list(folder.glob('config-*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


@pytest.fixture(scope="session")
def write_tiny():
    """``write_tiny_config`` for fixtures wider than a test (tiny_config is per test)."""
    return write_tiny_config


@pytest.fixture
def tiny_config(tmp_path: Path):
    """Write a small variant of examples/tiny.yaml; returns a function(overrides) -> path."""

    def make(**sections: dict | None) -> str:
        return write_tiny_config(tmp_path, **sections)

    return make
