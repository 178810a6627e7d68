"""What the reward cache hashes of a reward's code beyond its version: the source files that can change
without a new version.

Those are a reward file, a module of no distribution, and a module that lies outside the installed
trees (an editable install: ``pip install -e``, the workflow ``rewardhub new`` prints, keeps its source
where it was written), each with its *local imports*: the modules its ``import`` statements name,
followed from module to module, that are files outside the standard library and ``site-packages``.
A module installed in ``site-packages`` is known by its distribution's version instead.

What this cannot see: a module imported by name at run time (``importlib.import_module(name)``), a data
file the reward reads, and an installed (not editable) dependency changed in place without a new
version. Past :data:`MAX_FILES` files the walk stops, with a warning.
"""

from __future__ import annotations

import ast
import contextlib
import os
import sys
from collections.abc import Iterator

from .._targets import file_sha256
from .._targets import sha256

__all__ = ["MAX_FILES", "code_digest", "installed_roots", "is_local"]

#: the most source files hashed for one reward (its own and its local imports)
MAX_FILES = 500


def installed_roots() -> tuple[str, ...]:
    """The folders of the standard library and of installed distributions (real paths, ending in a
    separator)."""
    import site
    import sysconfig

    paths = sysconfig.get_paths()
    roots = {paths.get(key) for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    with contextlib.suppress(AttributeError):  # a virtualenv's old site module
        roots.update(site.getsitepackages())
        roots.add(site.getusersitepackages())
    roots.update(p for p in sys.path if os.path.basename(p.rstrip(os.sep)) in ("site-packages",
                                                                               "dist-packages"))
    return tuple(sorted({os.path.join(os.path.realpath(r), "") for r in roots if r}))


def is_local(path: str, roots: tuple[str, ...]) -> bool:
    """A Python source file outside the standard library and the installed distributions."""
    return path.endswith(".py") and not os.path.realpath(path).startswith(roots)


def _imported(tree: ast.AST, package: str) -> Iterator[str]:
    """The module names ``tree``'s import statements name (relative ones resolved against ``package``;
    ``from m import x`` names ``m`` and ``m.x``, which may be a submodule)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                yield from (".".join(parts[:k]) for k in range(1, len(parts) + 1))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pieces = package.split(".") if package else []
                if node.level - 1 > len(pieces):
                    continue
                head = pieces[:len(pieces) - (node.level - 1)]
                base = ".".join([*head, base] if base else head)
            if not base:
                continue
            parts = base.split(".")
            yield from (".".join(parts[:k]) for k in range(1, len(parts) + 1))
            yield from (f"{base}.{alias.name}" for alias in node.names if alias.name != "*")


def _module_file(name: str) -> str | None:
    module = sys.modules.get(name)
    if module is not None:
        return getattr(module, "__file__", None) or None
    from .._discovery import find_module_file

    try:
        return find_module_file(name) or None
    except Exception:  # an odd finder on sys.path: that module is not followed
        return None


def code_digest(path: str, module: str) -> str | None:
    """The sha256 of the local source files reachable from the file ``path`` of module ``module``
    (that file included), or ``None`` when ``path`` itself lies in an installed tree; a walk that stops at
    :data:`MAX_FILES` files says so on stderr."""
    roots = installed_roots()
    if not is_local(path, roots):
        return None
    seen: dict[str, str] = {}  # real path -> the module name it was reached by
    todo = [(os.path.realpath(path), module)]
    while todo:
        file, name = todo.pop()
        if file in seen:
            continue
        if len(seen) >= MAX_FILES:
            from ._routing import say_warning

            say_warning(f"the reward cache hashes at most {MAX_FILES} source files of the reward in "
                        f"{path}; a change in the others keeps old entries (clear the cache folder "
                        "after editing them)")
            break
        seen[file] = name
        try:
            with open(file, "rb") as f:
                tree = ast.parse(f.read())
        except (OSError, SyntaxError, ValueError):
            continue  # hashed below as it is (or as missing)
        package = name if os.path.basename(file) == "__init__.py" else name.rpartition(".")[0]
        for other in dict.fromkeys(_imported(tree, package)):
            found = _module_file(other)
            if found and is_local(found, roots):
                real = os.path.realpath(found)
                if real not in seen:
                    todo.append((real, other))
    h = sha256()
    for file in sorted(seen):
        try:
            digest = file_sha256(file)
        except OSError:
            digest = "missing"
        h.update(f"{seen[file]}\0{digest}\n".encode())
    return h.hexdigest()
