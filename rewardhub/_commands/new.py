"""``rewardhub new NAME``: write a ready reward package (pyproject with the entry point, the reward, a test, a
README).

``pip install -e NAME`` then shows the reward in ``rewardhub list``; its test runs the reward contract
(:func:`rewardhub.testing.check_reward`, what ``rewardhub test`` checks).
"""

from __future__ import annotations

import argparse
import keyword
import os
import re

from ..errors import UsageError

NAME = "new"
HELP = "write a new reward package (pyproject.toml with the entry point, the reward, a test, a README)"

#: a name that is a valid Python identifier (with - for _) and a valid distribution name: letters, digits,
#: single '_' or '-' between them, starting with a letter and ending with a letter or digit
_NAME_RE = re.compile(r"[a-z][a-z0-9]*(?:[_-][a-z0-9]+)*")

PYPROJECT = '''\
[build-system]
requires = ["setuptools>=77"]
build-backend = "setuptools.build_meta"

[project]
name = "{dist}"
version = "0.1.0"
description = "{reward}: a reward function for LLM RL, for rewardhub"
readme = "README.md"
requires-python = ">=3.11"
dependencies = ["rewardhub>={core}"]

[project.optional-dependencies]
test = ["pytest>=8"]

# rewardhub finds the reward here: `rewardhub list` shows it, a config names it (name: {reward})
[project.entry-points."rewardhub.rewards"]
{reward} = "{package}.reward:{reward}"

[tool.setuptools]
packages = ["{package}"]
'''

REWARD = '''\
"""The {reward} reward."""

from __future__ import annotations

import re

import rewardhub

_NUMBER = re.compile(r"-?\\d+(?:\\.\\d+)?")


@rewardhub.reward(name="{reward}", timeout_s=5, pure=True)
def {reward}(*, response: str, ground_truth: str | None = None, **kwargs: object) -> float | None:
    """1.0 when the last number in the response equals the ground truth, else 0.0 (None: no ground truth)."""
    if ground_truth is None:
        return None  # not applicable: the sample has nothing to compare with
    numbers = _NUMBER.findall(response)
    return 1.0 if numbers and numbers[-1] == str(ground_truth).strip() else 0.0
'''

TEST = '''\
"""The reward's own tests: its logic, and the contract `rewardhub test {reward}` checks."""

from rewardhub.testing import check_reward

from {package}.reward import {reward}


def test_scores():
    assert {reward}(response="6 * 7 = 42", ground_truth="42") == 1.0
    assert {reward}(response="it is 41", ground_truth="42") == 0.0
    assert {reward}(response="no number", ground_truth="42") == 0.0
    assert {reward}(response="42", ground_truth=None) is None


def test_contract():
    # a float for every row, edge responses survived, under its timeout, deterministic (it is
    # declared pure), the same scores on every executor; raises AssertionError with the table if not
    check_reward("{reward}", executors=("inline", "process"))
'''

README = '''\
# {dist}

The `{reward}` reward for [rewardhub](https://github.com/rewardhub/rewardhub): {summary}

```bash
pip install -e .
rewardhub list | grep {reward}       # the reward is registered through its entry point
rewardhub test {reward}              # the contract: a float per row, edge responses, timeout, executors
pytest tests/                        # its own tests (the contract included)
```

Use it in a config:

```yaml
reward:
  rewards:
    - name: {reward}
```

Edit `{package}/reward.py`; the `@rewardhub.reward(...)` decorator declares its default policy
(`timeout_s`, `pure`: no side effects, so the same call gives the same score).
'''


def name_taken(package: str) -> str | None:
    """Why a package (and reward, and distribution) named ``package`` would break something once
    installed, or ``None``: it is a standard-library module, an installed module or distribution,
    or a registered reward's name."""
    import importlib.machinery
    import importlib.metadata
    import sys

    dist = package.replace("_", "-")
    if package in sys.stdlib_module_names:
        return f"is a module of Python's standard library: the package would shadow `import {package}`"
    for candidate in {dist, package}:
        try:
            found = importlib.metadata.distribution(candidate)
        except importlib.metadata.PackageNotFoundError:
            continue
        return (f"is the name of the installed distribution {found.metadata['Name']!r}: installing the "
                "package would replace (uninstall) it")
    # the installed modules, not the working directory's (a file there is not installed)
    here = {"", ".", os.getcwd()}
    path = [p for p in sys.path if p not in here]
    if importlib.machinery.PathFinder.find_spec(package, path) is not None or package in sys.modules:
        return (f"is the import name of an installed module: the package would shadow "
                f"`import {package}`")
    from ..registry import get_registry

    if any(spec.name == package for spec in get_registry().list_rewards()):
        return (f"is a registered reward's name (`rewardhub show {package}`): a second reward of that name "
                "would make the registry refuse both")
    return None


def free_name(package: str) -> str:
    """A name like ``package`` that :func:`name_taken` accepts."""
    for candidate in (f"{package}_reward", f"my_{package}", f"my_{package}_reward"):
        if not keyword.iskeyword(candidate) and name_taken(candidate) is None:
            return candidate
    return "my_reward_2"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="the package and reward name (lower case, e.g. my_reward)")
    parser.add_argument("--dir", help="the folder to write (default: ./NAME with - for _)")


def run(args: argparse.Namespace) -> int:
    from ..registry import core_version

    name = args.name
    if not _NAME_RE.fullmatch(name):
        raise UsageError(f"{name!r} is not a package name: use lower-case letters and digits, with single "
                         "'_' or '-' between them, starting with a letter and ending with a letter or digit "
                         "(e.g. my_reward)")
    package = reward = name.replace("-", "_")
    if keyword.iskeyword(package):
        raise UsageError(f"{name!r} is a Python keyword\npick another name, e.g. {free_name(package)}")
    # a folder that is no importable name: `python -m` from its parent cannot shadow the package
    folder = args.dir or name.replace("_", "-")
    if os.path.exists(folder) and (not os.path.isdir(folder) or os.listdir(folder)):
        raise UsageError(f"{folder!r} already exists and is not an empty folder\n"
                         "pick another NAME, or --dir a new folder")
    taken = name_taken(package)
    if taken:
        raise UsageError(f"{name!r} {taken}\npick another name, e.g. {free_name(package)}")
    dist = name.replace("_", "-")
    values = {"dist": dist, "package": package, "reward": reward, "core": core_version(),
              "summary": "1.0 when the last number in the response equals the ground truth."}
    files = {
        "pyproject.toml": PYPROJECT,
        os.path.join(package, "__init__.py"): '"""{dist}: a rewardhub reward package."""\n',
        os.path.join(package, "reward.py"): REWARD,
        os.path.join("tests", f"test_{reward}.py"): TEST,
        "README.md": README,
    }
    for rel, text in files.items():
        path = os.path.join(folder, rel)
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text.format(**values))
    print(f"wrote {folder}/: pyproject.toml (entry point {reward} = {package}.reward:{reward}), "
          f"{package}/reward.py, tests/test_{reward}.py, README.md")
    print(
        f"next: pip install -e {folder} && rewardhub list && rewardhub test {reward} && pytest {folder}/tests"
    )
    return 0
