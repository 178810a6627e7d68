"""Meta-tests on the shape of the code: the import graph (no cycles, the wings apart), module sizes,
private names, short functions, who calls Ray actors."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import meta_helpers
import pytest
from meta_helpers import REPO
from meta_helpers import _modules
from meta_helpers import import_graph

MAX_LINES = 400

#: modules over MAX_LINES today, each being split by someone; this list may only shrink (the test
#: below fails when a listed module is back under the limit, so its line here goes too)
OVER_LIMIT: set[str] = set()

#: import cycles that exist today, each as its sorted set of modules; may only shrink (it is empty:
#: keep it so)
KNOWN_CYCLES: set[tuple[str, ...]] = set()


def cycles(graph: dict[str, set[str]]) -> set[tuple[str, ...]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: set[tuple[str, ...]] = set()

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.add(tuple(sorted(comp)))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_import_graph_sees_every_package():
    graph = import_graph()
    assert {"rewardhub.execution.runner", "rewardhub.distributed._pool", "rewardhub_trainer.cli",
            "rewardhub_math"} <= set(graph)
    assert "rewardhub.execution" in graph["rewardhub.distributed._pool"]  # a relative package import
    assert "rewardhub.execution._process" in graph["rewardhub.execution.runner"]
    # the graph finds a cycle when there is one
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == {("a", "b", "c")}


def test_no_import_cycles_between_modules():
    found = cycles(import_graph())
    assert found - KNOWN_CYCLES == set(), "new import cycle(s)"
    assert KNOWN_CYCLES - found == set(), "a known cycle is gone: remove it from KNOWN_CYCLES"


def test_execution_never_imports_distributed():
    graph = import_graph()
    bad = sorted(f"{m} -> {t}" for m, targets in graph.items() if m.startswith("rewardhub.execution")
                 for t in targets if t.startswith("rewardhub.distributed"))
    assert bad == []


@pytest.mark.parametrize(("package", "scorer"), [("rewardhub.verl", "rewardhub.verl.scorer"),
                                                 ("rewardhub.server", "rewardhub.server._batcher")])
def test_the_server_and_the_verl_wing_never_import_the_cli(package, scorer):
    """The verl wing (launch scripts, legacy reward keys, the reward managers) and the server are core:
    they score rows (:mod:`rewardhub.scoring`) and migrate through the core's modules, never through
    ``rewardhub._commands`` (a lazy import inside a function counts too)."""
    graph = import_graph()
    wing = [m for m in graph if m == package or m.startswith(package + ".")]
    assert scorer in wing and "rewardhub.scoring" in graph[scorer]
    bad = sorted(f"{m} -> {t}" for m in wing for t in graph[m] if t.startswith("rewardhub._commands"))
    assert bad == []


def _move_targets(path: Path) -> list[tuple[int, str]]:
    """``("move", "target")`` rule tuples and ``key -> target`` lines of rule tables
    (:func:`rewardhub.verl.keys.parse_rules`) written in a module: (line, target)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found += [(node.lineno, m[1]) for m in re.finditer(r"(?m)^\S+ -> (\S+)$", node.value)]
        elif (isinstance(node, ast.Tuple) and len(node.elts) >= 2
                and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts[:2])
                and node.elts[0].value == "move"):  # type: ignore[attr-defined]
            found.append((node.lineno, node.elts[1].value))  # type: ignore[attr-defined]
    return found


def test_no_rule_in_the_core_moves_a_key_outside_reward():
    """The core owns ``reward:`` alone: a ``("move", key)`` rule under rewardhub/ writes ``reward.*``; verl's
    trainer keys move in the trainer's own wing (rewardhub_trainer.verl), which owns those sections."""
    mods = _modules()
    core = {m: p for m, p in mods.items() if m == "rewardhub" or m.startswith("rewardhub.")}
    bad = [f"{m}:{line}: move -> {target}" for m, p in core.items() for line, target in _move_targets(p)
           if not (target == "reward" or target.startswith(("reward.", "reward[")))]
    assert bad == []
    # the rule sees the trainer's table (and would see one in the core)
    trainer_moves = [t for m, p in mods.items() if m.startswith("rewardhub_trainer.verl")
                     for _, t in _move_targets(p)]
    assert "trainer.lr" in trainer_moves


def test_the_config_package_is_the_loader_and_its_seams():
    """``rewardhub/config/`` holds the loader, the schema (with its frozen containers), fields, overrides,
    resolve, the report and the owners' seam; any one format's reader or mapping lives in its owner's wing."""
    names = {p.stem for p in (REPO / "rewardhub" / "config").glob("*.py")}
    assert names == {"__init__", "loader", "schema", "fields", "overrides", "_resolve", "migration_report",
                     "owners", "frozen"}


def test_modules_stay_under_the_size_limit():
    sizes = {str(p.relative_to(REPO)): len(p.read_text(encoding="utf-8").splitlines())
             for p in _modules().values()}
    over = {p for p, n in sizes.items() if n > MAX_LINES}
    assert over - OVER_LIMIT == set(), f"over {MAX_LINES} lines: split along a seam"
    assert OVER_LIMIT - over == set(), "back under the limit: remove it from OVER_LIMIT"


def test_every_hook_has_a_test_and_a_documented_example():
    import rewardhub.hookspecs as hookspecs

    hooks = sorted(n for n in dir(hookspecs) if n.startswith("rewardhub_"))
    assert hooks == ["rewardhub_doctor_lines", "rewardhub_legacy_aliases", "rewardhub_register_rewards"]
    tests_text = "\n".join(p.read_text(encoding="utf-8") for p in (REPO / "tests").rglob("test_*.py"))
    for hook in hooks:
        doc = getattr(hookspecs, hook).__doc__ or ""
        assert "Example::" in doc and f"def {hook}(" in doc, f"{hook}: document an example implementation"
        assert f"def {hook}(" in tests_text, f"{hook}: no test implements it"


def _private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def private_imports() -> list[str]:
    """Every import (``if TYPE_CHECKING:`` ones and lazy ones included) that breaks the private-name rule
    of :func:`test_no_module_imports_private_names`."""
    mods = _modules()
    ours = {m.split(".")[0] for m in mods}
    bad = []
    for mod, path in mods.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                pairs: list[tuple[str, str | None]] = [(a.name, None) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                # a submodule imported by name is a module; anything else is a name defined in `base`
                pairs = [(f"{base}.{a.name}", None) if f"{base}.{a.name}" in mods else (base, a.name)
                         for a in node.names]
            else:
                continue
            for target, name in pairs:
                if target.split(".")[0] not in ours:
                    continue
                parts = target.split(".")
                for i, part in enumerate(parts):
                    if _private(part):
                        owner = ".".join(parts[:i])
                        if mod != owner and not mod.startswith(owner + "."):
                            bad.append(f"{mod}: imports {target}, private to {owner}")
                        break
                if name is not None and _private(name):
                    bad.append(f"{mod}: imports {name} from {target}")
    return bad


def test_no_module_imports_private_names():
    """The private-name rule, for every module of rewardhub, the trainer and the plugins (imports of
    third-party modules are not checked):

    1. a module never imports a ``_private`` name (function, class, constant) from another module: what
       one module takes from another has a public name there;
    2. a ``_private`` module (or package) is private to the package that contains it: only that package's
       ``__init__`` and the modules under that package (sub-packages included) import it. Another package
       goes through the public surface: the package's ``__init__`` exports or a public module (e.g.
       ``rewardhub._commands.score`` imports ``rewardhub.execution``, not ``rewardhub.execution._columns``;
       ``rewardhub.verl.shim`` may import the public names of its sibling
       ``rewardhub.verl._legacy_leaves``).

    Dunder names (``__version__``) are not private.
    """
    assert len(_modules()) > 50
    assert private_imports() == []


def test_private_name_rule_sees_both_kinds(tmp_path, monkeypatch):
    """The rule above finds a private name taken from a module and a private module of another package."""
    root = tmp_path / "pkg"
    (root / "inner").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "inner" / "__init__.py").write_text("")
    (root / "inner" / "_impl.py").write_text("def _helper(): pass\ndef helper(): pass\n")
    (root / "inner" / "ok.py").write_text("from ._impl import helper\n")
    (root / "inner" / "bad.py").write_text("from ._impl import _helper\n")
    (root / "outside.py").write_text("from .inner._impl import helper\nfrom .inner import ok\n")
    monkeypatch.setattr(meta_helpers, "_packages", lambda: {"pkg": root})  # what _modules() reads
    assert sorted(private_imports()) == ["pkg.inner.bad: imports _helper from pkg.inner._impl",
                                         "pkg.outside: imports pkg.inner._impl, private to pkg.inner"]


#: modules whose functions each stay short (one unit per responsibility): module -> the most lines
SHORT_FUNCTIONS = {"rewardhub/_contract.py": 40}


def test_functions_stay_short_where_the_rule_holds():
    """The reward contract is one small unit per contract: no function there grows back into a loop
    that checks them all."""
    for rel, most in SHORT_FUNCTIONS.items():
        tree = ast.parse((REPO / rel).read_text(encoding="utf-8"))
        long = [f"{n.name}: {n.end_lineno - n.lineno + 1} lines" for n in ast.walk(tree)
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                and (n.end_lineno or n.lineno) - n.lineno + 1 > most]
        assert long == [], f"{rel}: over {most} lines: split along a seam"


#: the trainer's modules that call Ray actors (``handle.method.remote(...)``): the fleet, which implements
#: :mod:`rewardhub_trainer.protocols` over Ray, the rollouters' fault handling it uses, and the learner's
#: data-parallel ranks (an actor that drives its peers); a schedule, the evaluation and the run's loop
#: call typed methods only (and run against in-process fakes: tests/trainer/test_schedule_protocols.py)
RAY_CALLERS = {"fleet.py", "fleet_calls.py", "faults.py", "actors.py", "ddp.py"}


def _remote_calls(path: Path) -> list[int]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute) and node.func.attr == "remote"]


def test_only_the_fleet_calls_ray_actors():
    root = REPO / "trainer" / "rewardhub_trainer"
    found = {p.name: _remote_calls(p) for p in sorted(root.glob("*.py"))}
    assert [f"{name}:{line}" for name, lines in found.items() if name not in RAY_CALLERS
            for line in lines] == []
    assert all(found[name] for name in RAY_CALLERS), "a listed module calls no actor: remove it from the list"
    for part in ("schedule.py", "evaluate.py", "loop.py"):  # not even an import of Ray
        tree = ast.parse((root / part).read_text(encoding="utf-8"))
        names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and not n.level}
        assert {n.split(".")[0] for n in names} & {"ray"} == set(), part
