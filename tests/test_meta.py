"""Meta-tests: every module imports cleanly with warnings as errors; the core stays light."""

from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest
from meta_helpers import _modules
from meta_helpers import import_graph

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


#: what `rewardhub list` has no use for (each a share of its start-up, issue 44 §4): the config schema
#: (no config is read), difflib (close-match suggestions, only for an unknown key or name)
LIST_SKIPS = ("rewardhub.config.schema", "difflib")


def test_rewardhub_list_imports_only_what_it_uses():
    code = "import io, contextlib\nfrom rewardhub.cli import main\n" \
           "with contextlib.redirect_stdout(io.StringIO()):\n    main(['list', '--json'])\n" \
           f"import sys\nprint(','.join(m for m in {LIST_SKIPS!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines()[-1:] == [""], out


def test_public_names_exported():
    for name in rewardhub.__all__:
        assert getattr(rewardhub, name) is not None


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
