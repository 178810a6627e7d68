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

_NAME_RE = re.compile(r"^[a-z][a-z0-9_-]*$")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="the package and reward name (lower case, e.g. my_reward)")
    parser.add_argument("--dir", help="the folder to write (default: ./NAME with - for _)")


def run(args: argparse.Namespace) -> int:
    from ..registry import core_version

    name = args.name
    if not _NAME_RE.match(name):
        raise UsageError(f"{name!r} is not a package name: use lower-case letters, digits, '_' and '-', "
                         "starting with a letter (e.g. my_reward)")
    package = reward = name.replace("-", "_")
    if keyword.iskeyword(package):
        raise UsageError(f"{name!r} is a Python keyword; pick another name")
    # a folder that is no importable name: `python -m` from its parent cannot shadow the package
    folder = args.dir or name.replace("_", "-")
    if os.path.exists(folder) and (not os.path.isdir(folder) or os.listdir(folder)):
        raise UsageError(f"{folder!r} already exists and is not an empty folder\n"
                         "pick another NAME, or --dir a new folder")
    if reward in TEMPLATE_NAMES:
        raise UsageError(f"{name!r} is a name the reward module uses itself; pick another name")
    dist = name.replace("_", "-")
    written = files(dist, package, reward, core_version())
    for rel, text in written.items():
        path = os.path.join(folder, rel)
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    print(f"wrote {folder}/: pyproject.toml (no dependencies; entry point {reward} = "
          f"{package}.reward:compute_score), " + ", ".join(sorted(set(written) - {"pyproject.toml"})))
    print(f"next: pip install -e {folder} && rewardhub list && rewardhub test {reward} "
          f"&& pytest {folder}/tests")
    print(f"      verl, TRL and rewardhub use it as {folder}/README.md shows")
    return 0
