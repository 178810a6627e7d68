"""Tools for reward authors: `rewardhub new` from nothing to a listed, tested reward; `rewardhub test`'s
contract."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import tomllib

import pytest

from rewardhub._contract import run_contract


def _venv_beside_ours(path):
    """A virtual environment of its own (so the shared one is not altered) that sees our packages:
    a ``.pth`` adds our site-packages as a site directory, editable installs included."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    py = path / "bin" / "python"
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    ours = sysconfig.get_paths()["purelib"]
    with open(os.path.join(site, "_rewardhub_parent.pth"), "w") as f:
        f.write(f"import site; site.addsitedir({ours!r})\n")
    return py


@pytest.mark.slow
def test_new_install_list_test_from_nothing(tmp_path):
    py = _venv_beside_ours(tmp_path / "venv")
    work = tmp_path / "work"
    work.mkdir()

    def run(*args, cwd=work, check=True):
        res = subprocess.run([str(py), *args], capture_output=True, text=True, cwd=cwd, timeout=600)
        assert not check or res.returncode == 0, res.stdout + res.stderr
        return res

    listed = json.loads(run("-m", "rewardhub", "list", "--json").stdout)
    assert "shouty_answer" not in {r["name"] for r in listed}
    run("-m", "rewardhub", "new", "shouty_answer")
    pkg = work / "shouty-answer"
    assert sorted(p.name for p in pkg.iterdir()) == ["README.md", "pyproject.toml", "shouty_answer", "tests"]
    assert sorted(p.name for p in (pkg / "tests").iterdir()) == ["test_shouty_answer.py",
                                                                 "test_shouty_answer_contract.py"]
    # the package needs nothing: rewardhub is an optional extra (verl and TRL use it without; see
    # tests/test_reward_packages.py)
    with open(pkg / "pyproject.toml", "rb") as f:
        project = tomllib.load(f)["project"]
    assert project["dependencies"] == []
    assert project["optional-dependencies"]["rewardhub"][0].startswith("rewardhub>=")
    assert "import rewardhub" not in (pkg / "shouty_answer" / "reward.py").read_text()
    run("-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "-e", str(pkg))
    listed = {r["name"]: r for r in json.loads(run("-m", "rewardhub", "list", "--json").stdout)}
    assert listed["shouty_answer"]["status"] == "ok", listed["shouty_answer"]
    assert listed["shouty_answer"]["dist"] == "shouty-answer"
    assert listed["shouty_answer"]["source"] == "entry-point"
    # with its policy, read from the plain __rewardhub__ dict (the module is not imported to list it)
    assert listed["shouty_answer"]["policy"]["timeout_s"] == 5 and listed["shouty_answer"]["policy"]["pure"]
    assert listed["shouty_answer"]["policy_text"] == "timeout 5s, pure"
    table = run("-m", "rewardhub", "list").stdout
    assert [line for line in table.splitlines() if line.startswith("shouty_answer ")][0].split()[:6] == \
        ["shouty_answer", "shouty-answer", "0.1.0", "ok", "timeout", "5s,"]
    shown = json.loads(run("-m", "rewardhub", "show", "shouty_answer", "--json").stdout)
    assert shown["policy"]["timeout_s"] == 5 and shown["policy"]["pure"] is True
    # its own generated tests (one runs the contract) pass
    res = run("-m", "pytest", "-q", "-p", "no:cacheprovider", str(pkg / "tests"), cwd=tmp_path)
    assert "3 passed" in res.stdout
    res = run("-m", "rewardhub", "test", "shouty_answer", "--executors", "inline,process")
    assert "every contract holds" in res.stderr
    # an edit the author makes is live at once (editable install), and a broken contract fails the command
    reward = pkg / "shouty_answer" / "reward.py"
    text = reward.read_text()
    assert '    numbers = _NUMBER.findall(solution_str or "")' in text
    reward.write_text(text.replace('    numbers = _NUMBER.findall(solution_str or "")',
                                   '    numbers = _NUMBER.findall(solution_str or "")\n'
                                   "    if not solution_str:\n        raise ValueError('empty')"))
    res = run("-m", "rewardhub", "test", "shouty_answer", "--executors", "inline", check=False)
    assert res.returncode == 1
    assert "edge responses" in res.stdout and "FAIL" in res.stdout and "empty: " in res.stdout
    # the name is refused where it exists
    res = run("-m", "rewardhub", "new", "shouty_answer", check=False)
    assert res.returncode == 2 and res.stderr.startswith("ERROR: 'shouty-answer' already exists")


def test_new_refuses_bad_names(cli, tmp_path):
    for name, why in (
        ("9lives", "not a package name"),
        ("class", "Python keyword"),
        ("Bad", "not a package name"),
        # installed, these would uninstall rewardhub or setuptools, shadow the standard library or an
        # installed library, break a built-in reward, or not install at all
        ("rewardhub", "is the name of the installed distribution 'rewardhub': installing the package "
                      "would replace (uninstall) it"),
        ("setuptools", "is the name of the installed distribution 'setuptools'"),
        ("json", "is a module of Python's standard library: the package would shadow `import json`"),
        ("exact_match", "is a registered reward's name (`rewardhub show exact_match`)"),
        ("math_verify", "is the name of the installed distribution 'math-verify'"),
        ("yaml", "is the import name of an installed module: the package would shadow `import yaml`"),
        ("a_", "not a package name"),
        ("a__b", "not a package name"),
        ("my_reward\n", "not a package name"),
        # the package would be its own tests folder, or collide with folders and files of these names
        ("tests", "is the folder the package's own tests are written to (tests/)"),
        ("docs", "some distributions install as a top-level package by mistake"),
        ("conftest", "pytest, setuptools or a task runner reads from the working folder"),
    ):
        res = cli("new", name, cwd=str(tmp_path))
        assert res.returncode == 2 and why in res.stderr, (name, res.stderr)
        assert res.stderr.startswith("ERROR: ") and "Traceback" not in res.stderr
        if "not a package name" not in why:  # a name it would accept instead, itself free
            suggested = res.stderr.split("pick another name, e.g. ")[1].strip()
            assert cli("new", suggested, "--dir", str(tmp_path / "ok")).returncode == 0
            shutil.rmtree(tmp_path / "ok")
    assert list(tmp_path.iterdir()) == []


BAD_REWARDS = textwrap.dedent('''
    import random
    import time

    import rewardhub

    @rewardhub.reward(pure=True)
    def coin(*, response, **kw):
        """Declared pure, but random."""
        return random.random()

    def picky(*, response, **kw):
        """Raises on the edge responses."""
        if not response or len(response) > 10_000 or not response.isascii():
            raise ValueError("cannot read this")
        return 1.0

    def stringly(*, response, **kw):
        """Returns a string, not a float."""
        return "1.0"

    def sleepy(*, response, **kw):
        """Too slow on a long response."""
        if len(response) > 10_000:
            time.sleep(60)
        return 0.5

    def by_pid(*, response, **kw):
        """A different score in a worker process than inline."""
        import multiprocessing
        return 1.0 if multiprocessing.parent_process() is None else 0.0
''')


def test_contract_fails_each_broken_promise(tmp_path, monkeypatch):
    (tmp_path / "bad_rewards.py").write_text(BAD_REWARDS)
    monkeypatch.syspath_prepend(str(tmp_path))
    section = {
        "rewards": [
            {"module": "bad_rewards", "function": f, **({"timeout_s": 2} if f == "sleepy" else {})}
            for f in ("coin", "picky", "stringly", "sleepy", "by_pid")
        ]
    }
    checks = {(c.term, c.contract): c for c in run_contract(section, executors=("inline", "process"))}
    assert checks["coin", "deterministic"].status == "FAIL"
    assert checks["coin", "returns a score"].status == "pass"
    assert checks["picky", "edge responses"].status == "FAIL"
    assert "empty: " in checks["picky", "edge responses"].detail and "cannot read this" in \
        checks["picky", "edge responses"].detail
    assert checks["picky", "returns a score"].status == "pass"
    assert checks["stringly", "returns a score"].status == "FAIL"
    assert checks["sleepy", "under timeout"].status == "FAIL"
    assert "very long response" in checks["sleepy", "under timeout"].detail
    assert checks["sleepy", "returns a score"].status == "pass"
    assert checks["by_pid", "same on every executor"].status == "FAIL"
    assert checks["by_pid", "deterministic"].status == "skip"


BOOL_REWARDS = textwrap.dedent('''
    import numpy as np

    def py_bool(*, response, **kw):
        return "42" in response

    def np_bool(*, response, **kw):
        return np.bool_("42" in response)

    def in_a_dict(*, response, **kw):
        return {"score": "42" in response}
''')


@pytest.mark.parametrize("executor", ["inline", "thread", "process"])
def test_test_reports_a_reward_returning_a_bool_as_it_reports_numpys_bool(cli, tmp_path, executor):
    """A Python bool (scored 1.0 / 0.0) fails `returns a score` as numpy's bool_ does: never a pass."""
    (tmp_path / "bools.py").write_text(BOOL_REWARDS)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("reward:\n  rewards:\n" + "".join(
        f"    - {{path: bools.py, function: {f}, executor: {executor}}}\n"
        for f in ("py_bool", "np_bool", "in_a_dict")))
    res = cli("test", str(cfg), "--json", cwd=str(tmp_path))
    assert res.returncode == 1, res.stderr
    checks = {(c["term"], c["contract"]): c for c in json.loads(res.stdout)}
    for term in ("py_bool", "np_bool", "in_a_dict"):
        assert checks[term, "returns a score"]["status"] == "FAIL", (term, checks[term, "returns a score"])
    assert "returned a bool" in checks["py_bool", "returns a score"]["detail"]


ESCAPING_REWARDS = textwrap.dedent('''
    import os

    def exits(*, response, **kw):
        """Ends its process on one row."""
        if "41" in response:
            os._exit(0)
        return 1.0

    def never(*, response, **kw):
        """Not applicable to any row."""
        return None

    def chatty(*, response, **kw):
        """Prints on every call."""
        print("scoring", response[:10])
        return 0.5
''')


def test_test_fails_an_exit_a_reward_that_never_scores_and_keeps_prints_out_of_json(cli, tmp_path):
    (tmp_path / "escaping.py").write_text(ESCAPING_REWARDS)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("reward:\n  rewards:\n" + "".join(
        f"    - path: escaping.py\n      function: {f}\n" for f in ("exits", "never", "chatty")))
    res = cli("test", str(cfg), "--executors", "inline", "--json", cwd=str(tmp_path))
    assert res.returncode == 1, res.stderr
    checks = {(c["term"], c["contract"]): c for c in json.loads(res.stdout)}  # prints kept out: valid JSON
    assert "scoring" in res.stderr
    exited = checks["exits", "survives its calls"]
    assert exited["status"] == "FAIL" and "reward worker process died (exit code 0)" in exited["detail"]
    assert [k for k in checks if k[0] == "exits"] == [("exits", "survives its calls")]  # not run inline
    assert checks["never", "applies to a row"]["status"] == "FAIL"
    assert checks["never", "applies to a row"]["detail"].startswith(
        "returned None (not applicable) for all 3 rows")
    assert {c["status"] for k, c in checks.items() if k[0] == "chatty"} <= {"pass", "skip"}


def test_cli_table_and_exit_codes(cli, tmp_path):
    res = cli("test", "exact_match")  # no Ray started: exact_match does not declare executor: ray
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[0].split() == ["reward", "contract", "result", "detail"]
    assert res.stdout.splitlines()[-1].endswith(
        "inline, process agree (as declared: inline); ray not checked: no term declares it (--ray adds it)")
    assert len(res.stdout.splitlines()) == 2 + 7 and all(" pass " in line or " skip " in line
                                                          for line in res.stdout.splitlines()[2:])
    assert "every contract holds" in res.stderr
    data = tmp_path / "d.jsonl"
    data.write_text("\n".join(json.dumps({"response": r, "ground_truth": "a"}) for r in ("a", "b")) + "\n")
    res = cli("test", "exact_match", str(data), "--executors", "inline", "--json")
    checks = json.loads(res.stdout)
    assert [c["contract"] for c in checks] == [
        "survives its calls",
        "returns a score",
        "applies to a row",
        "edge responses",
        "under timeout",
        "deterministic",
        "same on every executor",
    ]
    assert next(c for c in checks if c["contract"] == "returns a score")["detail"] == "2 rows: 1, 0"
    # a config file: each of its terms, with its own kwargs; a named reward with --kwargs
    res = cli("test", os.path.join(os.path.dirname(os.path.dirname(__file__)), "examples", "score.yaml"),
              "--executors", "inline", "--json")
    assert res.returncode == 0, res.stderr
    assert sorted({c["term"] for c in json.loads(res.stdout)}) == ["boxed_format", "math_verify"]
    res = cli("test", "regex_match", "--kwargs", '{"pattern": "[0-9]"}', "--executors", "inline", "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)[1]["detail"] == "3 rows: 1, 1, 1"
    res = cli("test", "no_such_reward")
    assert res.returncode == 2 and res.stderr.startswith("ERROR: ")
    res = cli("test", "exact_match", "--executors", "gpu")
    assert res.returncode == 2 and "choose from inline, process, ray" in res.stderr


def test_each_contract_is_reported_in_the_documented_order():
    """Every term gets one check per contract of the module's docstring, in that order."""
    import rewardhub._contract as contract

    documented = re.findall(r"^- ``([^`]+)``:", contract.__doc__ or "", re.M)
    assert len(documented) == 1 + len(contract.PER_TERM)
    checks = run_contract({"rewards": [{"name": "exact_match"}]}, executors=("inline",))
    assert [c.contract for c in checks] == documented
