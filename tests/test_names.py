"""One owner per concept: no two modules define a public function or class of the same name, and the
allowed values of a config key are spelled in one place (issue 30 §4: twins).

A twin is two modules that both answer "where is X?" (``check_sample``, ``where``, ``start_ray`` /
``ensure_ray``, three ``Pool``-like classes, two ``SandboxConfig``): a newcomer cannot tell which one
is meant, and a fix to one misses the other. The rule below keeps them from coming back.
"""

from __future__ import annotations

import ast
import json
from collections import defaultdict
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

#: names that several modules define on purpose: a protocol, not a concept of their own
ALLOWED: dict[str, str] = {
    "main": "a console script's entry function (rewardhub, rewardhub-train, the code sandbox's launcher)",
    "add_arguments": "the subcommand protocol: every command module has NAME, HELP, add_arguments, run",
    "run": "the subcommand protocol (see add_arguments)",
    "load_tokenizer": "the trainer and the models plugin each load their own model folders; neither "
                      "distribution may import the other, and the core loads no models",
}

#: twins that exist today, each with why it is not merged yet; this list may only shrink (the test
#: fails when a listed name is no longer twinned, so its line here goes too)
KNOWN: dict[str, str] = {}


def _roots(repo: Path) -> list[Path]:
    plugins = sorted(repo.glob("plugins/*/rewardhub_*"))
    return [repo / "rewardhub", repo / "trainer" / "rewardhub_trainer", *plugins]


def _hooks(repo: Path) -> set[str]:
    """The hook names of the core's hookspecs: plugins implement them under the same name."""
    tree = ast.parse((repo / "rewardhub" / "hookspecs.py").read_text(encoding="utf-8"))
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("rewardhub_")}


def public_twins(repo: Path) -> dict[str, list[str]]:
    """Public top-level function or class name -> the modules that define it, where there are two or
    more (a private ``_name`` is its module's own business)."""
    where: dict[str, set[str]] = defaultdict(set)
    for root in _roots(repo):
        for path in sorted(root.rglob("*.py")):
            for node in ast.parse(path.read_text(encoding="utf-8")).body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and \
                        not node.name.startswith("_"):
                    where[node.name].add(str(path.relative_to(repo)))
    hooks = _hooks(repo)
    return {name: sorted(mods) for name, mods in where.items() if len(mods) > 1 and name not in hooks}


def test_no_two_modules_define_the_same_public_name():
    twins = {n: m for n, m in public_twins(REPO).items() if n not in ALLOWED}
    new = {n: m for n, m in twins.items() if n not in KNOWN}
    assert not new, "defined in two modules (give one owner: the other imports it, or rename what " \
                    f"is another concept):\n{json.dumps(new, indent=1)}"
    gone = set(KNOWN) - set(twins)
    assert not gone, f"no longer twins: remove {sorted(gone)} from KNOWN"


def test_the_twin_rule_sees_a_twin_and_spares_hooks(tmp_path):
    """The scan itself: a function defined in the core and a plugin is a twin; a hook is not."""
    (tmp_path / "rewardhub").mkdir()
    (tmp_path / "rewardhub" / "hookspecs.py").write_text("def rewardhub_register_rewards(): ...\n")
    (tmp_path / "rewardhub" / "a.py").write_text("def where(): ...\nclass Pool: ...\ndef _helper(): ...\n")
    plugin = tmp_path / "plugins" / "rewardhub-x" / "rewardhub_x"
    plugin.mkdir(parents=True)
    (plugin / "b.py").write_text("def where(): ...\ndef _helper(): ...\n"
                                 "def rewardhub_register_rewards(): ...\n"
                                 "class Pool:\n    def where(self): ...\n")
    assert public_twins(tmp_path) == {"Pool": ["plugins/rewardhub-x/rewardhub_x/b.py", "rewardhub/a.py"],
                                      "where": ["plugins/rewardhub-x/rewardhub_x/b.py", "rewardhub/a.py"]}


# ---- the allowed values of a config key: one table -----------------------------------------------

def spelled_choices(repo: Path) -> dict[str, list[str]]:
    """Each key of the validator's ``CHOICES`` -> every place in ``rewardhub/`` that writes its allowed
    values out as a literal tuple, list or set (``None`` aside; a ``Literal[...]`` type is not a value)."""
    from rewardhub.config.schema import CHOICES

    want = {frozenset(v for v in values if v is not None): key for key, values in CHOICES.items()}
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted((repo / "rewardhub").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        in_types = {id(n.slice) for n in ast.walk(tree) if isinstance(n, ast.Subscript)}
        for node in ast.walk(tree):
            literal = isinstance(node, (ast.Tuple, ast.List, ast.Set)) and id(node) not in in_types
            if literal and node.elts and all(isinstance(e, ast.Constant) for e in node.elts):
                values = frozenset(e.value for e in node.elts if e.value is not None)
                if len(values) > 1 and values in want:
                    found[want[values]].append(f"{path.relative_to(repo)}:{node.lineno}")
    return dict(found)


def test_each_keys_allowed_values_are_spelled_once():
    """The pool's dispatch, the runner's adapters and aggregations, the decorator's kinds: each list of
    allowed values lives in one place, which the validator's ``CHOICES`` and every other check read."""
    from rewardhub.config.schema import CHOICES

    spelled = spelled_choices(REPO)
    twice = {key: places for key, places in spelled.items() if len(places) > 1}
    assert not twice, f"allowed values written out more than once (read them from one table):\n{twice}"
    assert set(spelled) == set(CHOICES), "every key's values are written out somewhere"


def test_the_pool_takes_its_dispatch_values_from_the_validators_table(monkeypatch):
    """Before any Ray starts: a dispatch the validator's table does not list is refused by the pool."""
    from rewardhub.config.schema import CHOICES
    from rewardhub.distributed import RewardWorkerPool
    from rewardhub.errors import UsageError

    monkeypatch.setitem(CHOICES, "workers.dispatch", ("least_loaded",))
    cfg = {"rewards": [{"name": "exact_match"}], "workers": {"num_workers": 1}}
    with pytest.raises(UsageError, match=r"dispatch='round_robin' is not valid\nallowed: least_loaded$"):
        RewardWorkerPool(cfg, dispatch="round_robin")


# ---- the merged twins' contracts -----------------------------------------------------------------

def test_process_location_outside_ray():
    """The one ``where`` (the reward workers' and the trainer's actors' infos): outside Ray the node is
    the hostname, with no Ray node id and no GPUs given. Checked in a fresh interpreter: an earlier
    test of the session may have left Ray initialised in this one."""
    import subprocess
    import sys

    code = """
import os, socket
from rewardhub.distributed import process_location
here = process_location()
assert here["node_id"] is None and here["node"] == here["hostname"] == socket.gethostname(), here
assert here["pid"] == os.getpid() and here["gpu_ids"] == [], here
assert here["cuda_visible"] == os.environ.get("CUDA_VISIBLE_DEVICES"), here
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr


def test_migrate_takes_the_loaders_steps(tmp_path, monkeypatch, capsys):
    """``rewardhub migrate`` and every command that loads a plan read, override, migrate and check the
    sections through the one function (it used to repeat the loader's steps itself)."""
    import rewardhub.config.loader as loader
    from rewardhub.cli import main

    calls = []
    real = loader.read_migrated

    def spy(path=None, overrides=(), **kw):
        calls.append((path, kw))
        return real(path, overrides, **kw)

    monkeypatch.setattr(loader, "read_migrated", spy)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("reward_model:\n  reward_manager: naive\nreward:\n  rewards:\n    - name: exact_match\n")
    assert main(["migrate", str(cfg)]) == 0
    assert main(["check", str(cfg)]) == 0
    capsys.readouterr()
    assert calls == [(str(cfg), {"keep_unknown": True}), (str(cfg), {})]
