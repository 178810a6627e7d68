"""Meta-tests: every module imports cleanly with warnings as errors; the core stays light."""

from __future__ import annotations

import ast
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

import rewardhub

HEAVY = (
    "torch",
    "ray",
    "transformers",
    "vllm",
    "numpy",
    "omegaconf",
    "sympy",
    "math_verify",
    "reasoning_gym",
)
#: (the verl managers' classes import verl: tests/test_verl_reward_loop.py imports them with verl-compat)
MODULES = sorted(m.name for m in pkgutil.walk_packages(rewardhub.__path__, "rewardhub.")
                 if not m.name.startswith("rewardhub.distributed") and m.name != "rewardhub.verl._classes")


#: the modules are imported in this many fresh interpreters (one per module cost a minute of the suite)
IMPORT_BATCHES = 4
_IMPORT_EACH = """
import importlib, sys, traceback
failed = []
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except BaseException:
        failed.append(name + ":\\n" + traceback.format_exc())
print("\\n".join(failed))
sys.exit(1 if failed else 0)
"""


@pytest.mark.parametrize("batch", range(IMPORT_BATCHES))
def test_module_imports_with_warnings_as_errors(batch):
    """Every module imports with warnings as errors; a batch's modules in one interpreter, each one
    imported in its own try (a failure names the module and keeps the others checked)."""
    mine = MODULES[batch::IMPORT_BATCHES]
    done = subprocess.run([sys.executable, "-W", "error", "-c", _IMPORT_EACH, *mine], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def _heavy_after(code: str) -> list[str]:
    probe = f"{code}\nimport sys\nprint(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    last = out.splitlines()[-1] if out.splitlines() else ""
    return [m for m in last.split(",") if m]


def test_import_rewardhub_is_light():
    assert _heavy_after("import rewardhub") == []


def test_rewardhub_list_is_light():
    code = "import io, contextlib\nfrom rewardhub.cli import main\n" \
           "with contextlib.redirect_stdout(io.StringIO()):\n    main(['list', '--json'])"
    assert _heavy_after(code) == []


def test_public_names_exported():
    for name in rewardhub.__all__:
        assert getattr(rewardhub, name) is not None


# ---- the shape of the code: import graph and module sizes ---------------------------------------

REPO = Path(__file__).resolve().parent.parent
MAX_LINES = 400

#: modules over MAX_LINES today, each being split by someone; this list may only shrink (the test
#: below fails when a listed module is back under the limit, so its line here goes too)
OVER_LIMIT: set[str] = set()

#: import cycles that exist today, each as its sorted set of modules; may only shrink (it is empty:
#: keep it so)
KNOWN_CYCLES: set[tuple[str, ...]] = set()


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
    monkeypatch.setitem(globals(), "_packages", lambda: {"pkg": root})
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


# ---- one way to score (issue 44 §1) ------------------------------------------------------------

#: the scoring wing: what opens a scorer and what scores (rows in and out, the executors, the client)
SCORING_WING = ("rewardhub.scorers", "rewardhub.scoring", "rewardhub.execution")


def _in(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def _attribute_reads(path: Path, attr: str) -> list[int]:
    """Lines where ``X.<attr>`` is read, not called (``actor.f.remote()`` and ``@ray.remote`` are Ray's)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == attr
            and id(n) not in called and not (isinstance(n.value, ast.Name) and n.value.id == "ray")]


def test_only_the_scoring_wing_and_the_loader_read_reward_remote(tmp_path):
    """Local or remote is decided in one place (``rewardhub.scorers.open_scorer``): everyone else asks it."""
    found = {m: _attribute_reads(p, "remote") for m, p in _modules().items()}
    bad = [f"{m}:{line}" for m, lines in found.items() if not _in(m, (*SCORING_WING, "rewardhub.config"))
           for line in lines]
    assert bad == []
    assert found["rewardhub.scorers"], "the rule sees the opener's own read"
    probe = tmp_path / "probe.py"
    probe.write_text("def f(plan, actor):\n    actor.go.remote()\n    return plan.reward.remote\n")
    assert _attribute_reads(probe, "remote") == [3]


def test_the_server_is_imported_by_the_serve_command_alone():
    graph = import_graph()
    users = sorted(m for m, targets in graph.items() if not _in(m, ("rewardhub.server",))
                   and any(_in(t, ("rewardhub.server",)) for t in targets))
    assert users == ["rewardhub._commands.serve"]


def test_the_scoring_wing_imports_neither_the_server_nor_aiohttp():
    graph = import_graph()
    wing = [m for m in graph if _in(m, SCORING_WING)]
    assert "rewardhub.execution.remote.client" in wing
    assert sorted(f"{m} -> {t}" for m in wing for t in graph[m] if _in(t, ("rewardhub.server",))) == []
    aiohttp = []
    for m in wing:
        tree = ast.parse(_modules()[m].read_text(encoding="utf-8"))
        names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and not n.level}
        aiohttp += [m for n in names if n.split(".")[0] == "aiohttp"]
    assert aiohttp == []


def test_no_runner_scorer_or_pool_parameter_is_typed_any():
    """The seams between callers and what scores are typed (``Scorer``, a pool's class), never ``Any``."""
    bad = []
    for m, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs):
                    if (a.arg in ("runner", "scorer", "pool") or a.arg.endswith(("_runner", "_scorer"))) \
                            and (a.annotation is None or ast.unparse(a.annotation) == "Any"):
                        bad.append(f"{m}:{node.lineno} {node.name}({a.arg})")
    assert bad == []


def test_the_config_package_never_imports_verl():
    """The loader and the schema know owners, not formats: verl's owner suggests fixes for its own keys."""
    graph = import_graph()
    assert sorted(f"{m} -> {t}" for m, targets in graph.items() if _in(m, ("rewardhub.config",))
                  for t in targets if _in(t, ("rewardhub.verl",))) == []
