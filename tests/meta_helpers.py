"""What the meta-test modules share: the repo, its packages and modules, their import graph."""

from __future__ import annotations

import ast
from pathlib import Path

# ---- the shape of the code: import graph and module sizes ---------------------------------------

REPO = Path(__file__).resolve().parent.parent


def _packages() -> dict[str, Path]:
    """Import name -> folder of every package in rewardhub/, plugins/ and trainer/."""
    found = {"rewardhub": REPO / "rewardhub", "rewardhub_trainer": REPO / "trainer" / "rewardhub_trainer"}
    for init in sorted(REPO.glob("plugins/*/*/__init__.py")):
        found[init.parent.name] = init.parent
    return found


def _modules() -> dict[str, Path]:
    mods = {}
    for name, root in _packages().items():
        for f in sorted(root.rglob("*.py")):
            parts = [name, *f.relative_to(root).with_suffix("").parts]
            mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return mods


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement, at any depth (a lazy import is still a dependency), but those under
    ``if TYPE_CHECKING:``, which never run."""
    out: list[ast.Import | ast.ImportFrom] = []
    todo = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            todo.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.append(node)
        todo.extend(ast.iter_child_nodes(node))
    return out


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of these packages it imports (``from pkg import sub`` counts as ``pkg.sub``)."""
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            for target in targets:
                while target and target not in mods:
                    target = target.rpartition(".")[0]
                if target and target != mod:
                    graph[mod].add(target)
    return graph
