"""The pluggy plugin: one reward per ``@vf.reward`` method of every installed verifiers environment.

An environment is a distribution that requires ``verifiers``; its rewards are found by reading its
source (no import: verifiers takes seconds to import, and ``rewardhub list`` must stay fast), so a
reward defined outside the package's own files, or a weight that is not a literal, is not listed
here; :mod:`rewardhub_verifiers.scoring` always calls the environment's own methods.
"""

from __future__ import annotations

import ast
import os
import re
import sys
from pathlib import Path

from rewardhub import RewardSpec
from rewardhub import hookimpl
from rewardhub.types import ExecutionPolicy

__all__ = ["Environment", "environments", "rewardhub_register_rewards"]

_REQUIRES = re.compile(r"^Requires-Dist:\s*verifiers\b(?!-)", re.IGNORECASE | re.MULTILINE)
_POLICY = ExecutionPolicy(timeout_s=60.0)


class Environment:
    """An installed verifiers environment: its distribution, version, module and rewards."""

    def __init__(self, dist: str, version: str, module: str, rewards: dict[str, float]) -> None:
        self.dist, self.version, self.module, self.rewards = dist, version, module, rewards


def _dist_infos() -> list[Path]:
    found: dict[str, Path] = {}
    for entry in sys.path:
        try:
            names = sorted(os.listdir(entry or "."))
        except OSError:
            continue
        for name in names:
            if name.endswith(".dist-info"):
                key = name.split("-")[0].lower().replace(".", "_")
                found.setdefault(key, Path(entry or ".") / name)  # the first on sys.path wins
    return list(found.values())


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _weight(decorator: ast.expr) -> float | None:
    """The rubric weight a ``@vf.reward`` / ``@reward(weight=...)`` decorator gives, else None."""
    call = decorator if isinstance(decorator, ast.Call) else None
    func = call.func if call is not None else decorator
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name != "reward":
        return None
    for kw in call.keywords if call is not None else ():
        value = kw.value.value if isinstance(kw.value, ast.Constant) else None
        if kw.arg == "weight" and isinstance(value, int | float):
            return float(value)
    return 1.0


def _rewards_in(files: list[Path]) -> dict[str, float]:
    rewards: dict[str, float] = {}
    for file in files:
        try:
            tree = ast.parse(_read(file))
        except SyntaxError:
            continue
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            for fn in cls.body:
                if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                    for dec in fn.decorator_list:
                        weight = _weight(dec)
                        if weight is not None:
                            rewards[fn.name] = weight
    return rewards


def _headers(path: Path) -> str:
    """A METADATA file's headers (what comes before its first empty line: not the long description)."""
    lines = []
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.strip():
                    break
                lines.append(line)
    except OSError:
        pass
    return "".join(lines)


def environments() -> list[Environment]:
    """The installed distributions that require verifiers and define ``@vf.reward`` methods (none
    where verifiers itself is not importable: then no environment could be scored)."""
    import importlib.util

    if importlib.util.find_spec("verifiers") is None:
        return []
    envs = []
    for info in _dist_infos():
        meta = _headers(info / "METADATA")
        if not _REQUIRES.search(meta):
            continue
        dist = re.search(r"^Name:\s*(\S+)", meta, re.MULTILINE)
        version = re.search(r"^Version:\s*(\S+)", meta, re.MULTILINE)
        if dist is None or version is None or dist.group(1).lower().startswith("rewardhub"):
            continue
        modules = _read(info / "top_level.txt").split() or [dist.group(1).replace("-", "_").lower()]
        for module in modules:
            root = info.parent / module
            files = sorted(root.rglob("*.py")) if root.is_dir() else [info.parent / f"{module}.py"]
            rewards = _rewards_in([f for f in files if f.is_file()])
            if rewards:
                envs.append(Environment(dist.group(1), version.group(1), module, rewards))
    return envs


@hookimpl
def rewardhub_register_rewards() -> list[RewardSpec]:
    specs = []
    for env in environments():
        common = dict(source="plugin", dist=env.dist, version=env.version, plugin="verifiers",
                      policy=_POLICY, capabilities=("async",))
        weights = ", ".join(f"{name} x{w:g}" for name, w in sorted(env.rewards.items()))
        specs.append(RewardSpec(
            name=f"verifiers.{env.module}", target="rewardhub_verifiers.scoring:score_rubric",
            params=(("env", env.module),),
            summary=f"verifiers environment {env.module!r}: its rubric's weighted sum ({weights})",
            **common,  # type: ignore[arg-type]
        ))
        for reward, weight in sorted(env.rewards.items()):
            specs.append(RewardSpec(
                name=f"verifiers.{env.module}.{reward}", target="rewardhub_verifiers.scoring:score_reward",
                params=(("env", env.module), ("reward", reward)),
                summary=f"verifiers environment {env.module!r}: its {reward!r} reward (rubric weight "
                        f"{weight:g})",
                **common,  # type: ignore[arg-type]
            ))
    return specs
