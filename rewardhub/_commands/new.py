"""``rewardhub new NAME``: write a ready reward package (pyproject with the entry point, the reward, its
tests, a README) that needs no rewardhub: verl, TRL and rewardhub all use it (see ``_new_template``).

``pip install -e NAME`` then shows the reward in ``rewardhub list``, with its policy; one test runs the
reward contract where rewardhub is installed (:func:`rewardhub.testing.check_reward`, what
``rewardhub test`` checks).
"""

from __future__ import annotations

import argparse
import keyword
import os
import re

from ..errors import UsageError
from ._new_template import TEMPLATE_NAMES
from ._new_template import files

NAME = "new"
HELP = "write a new reward package (no rewardhub dependency: the entry point, the reward, tests, a README)"

#: a name that is a valid Python identifier (with - for _) and a valid distribution name: letters, digits,
#: single '_' or '-' between them, starting with a letter and ending with a letter or digit
_NAME_RE = re.compile(r"[a-z][a-z0-9]*(?:[_-][a-z0-9]+)*")
#: the longest name: a folder, a module and a dist-info folder are named after it (255 bytes at most each)
MAX_NAME = 100


#: names refused for what they collide with once written or installed (the reason is the error's)
_RESERVED = {
    "tests": "is the folder the package's own tests are written to (tests/): the package and its tests "
             "would be one folder, its test files installed as the package",
    **dict.fromkeys(
        ("test", "testing", "docs", "doc", "examples", "example", "scripts", "tools", "utils", "build",
         "dist", "src", "lib", "bin", "benchmarks", "bench", "venv", "env", "site_packages"),
        "is a folder name many projects use and some distributions install as a top-level package by "
        "mistake: installed, the package would collide with those (and with a folder of that name where "
        "Python or pytest runs)"),
    **dict.fromkeys(("conftest", "setup", "noxfile", "tasks"),
                    "is a file name that pytest, setuptools or a task runner reads from the working folder: "
                    "the package would be taken for it (or hidden by it)"),
}


def name_taken(package: str) -> str | None:
    """Why a package (and reward, and distribution) named ``package`` would break something once
    installed, or ``None``: it is a standard-library module, an installed module or distribution,
    or a registered reward's name."""
    import importlib.machinery
    import importlib.metadata
    import sys

    dist = package.replace("_", "-")
    if package in _RESERVED:
        return _RESERVED[package]
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


def _write(folder: str, written: dict[str, str]) -> None:
    """The package's files under ``folder``; a folder that cannot be written is a
    :class:`~rewardhub.errors.UsageError`, and a folder this made is removed again."""
    import shutil

    made = not os.path.exists(folder)
    try:
        for rel, text in written.items():
            path = os.path.join(folder, rel)
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
    except OSError as exc:
        if made:
            shutil.rmtree(folder, ignore_errors=True)
        raise UsageError(f"cannot write the package to {folder!r}: {exc.strerror or exc} "
                         f"({exc.filename or folder})\n--dir a folder you can write to") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="the package and reward name (lower case, e.g. my_reward)")
    parser.add_argument("--dir", help="the folder to write (default: ./NAME with - for _)")


def run(args: argparse.Namespace) -> int:
    from ..registry import core_version

    name = args.name
    if len(name) > MAX_NAME:
        raise UsageError(f"the name is {len(name)} characters long ({name[:20]}...): at most {MAX_NAME} "
                         "(the package's folder and files are named after it)\npick a shorter name, e.g. "
                         "my_reward")
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
    if reward in TEMPLATE_NAMES:
        raise UsageError(f"{name!r} is a name the reward module uses itself; pick another name")
    taken = name_taken(package)
    if taken:
        raise UsageError(f"{name!r} {taken}\npick another name, e.g. {free_name(package)}")
    dist = name.replace("_", "-")
    written = files(dist, package, reward, core_version())
    _write(folder, written)
    print(f"wrote {folder}/: pyproject.toml (no dependencies; entry point {reward} = "
          f"{package}.reward:compute_score), " + ", ".join(sorted(set(written) - {"pyproject.toml"})))
    print(f"next: pip install -e {folder} && rewardhub list && rewardhub test {reward} "
          f"&& pytest {folder}/tests")
    print(f"      verl, TRL and rewardhub use it as {folder}/README.md shows")
    return 0
