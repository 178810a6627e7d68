"""rewardhub installs the usual ways from this repository: a wheel and an sdist of the core, of each
plugin and of the trainer (each with its own name and version; a wheel built from the sdist holds the
same files), and ``pip install`` of the built wheels, of the repository's path and of a git URL, into
fresh virtual environments that have no rewardhub."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: every distribution this repository builds: its folder, relative to the repository
PLUGINS = os.path.join(REPO, "plugins")
PROJECTS = [".", "trainer", *sorted(os.path.join("plugins", p) for p in os.listdir(PLUGINS)
                                    if os.path.isfile(os.path.join(REPO, "plugins", p, "pyproject.toml")))]


def _env() -> dict[str, str]:
    """Without our PYTHONPATH: it would put this checkout's rewardhub on the fresh venvs' path."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def _run(args, cwd) -> subprocess.CompletedProcess[str]:
    res = subprocess.run([str(a) for a in args], capture_output=True, text=True, env=_env(), cwd=cwd,
                         timeout=600)
    assert res.returncode == 0, f"{args}\n{res.stdout}\n{res.stderr}"
    return res


def _venv(path, *packages: str) -> str:
    base = os.path.join(sys.base_prefix, "bin", f"python{sys.version_info[0]}.{sys.version_info[1]}")
    _run([base, "-m", "venv", path], cwd=os.path.dirname(path))
    py = os.path.join(path, "bin", "python")
    if packages:
        _run([py, "-m", "pip", "install", "-q", *packages], cwd=path)
    return py


def _project(folder: str) -> dict[str, str]:
    with open(os.path.join(REPO, folder, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    return {"name": project["name"], "version": project["version"],
            "file": project["name"].replace("-", "_")}


def _copy_of_checkout(dest) -> str:
    """The checkout's files as git would commit them (tracked and not ignored), copied to ``dest``: a
    build writes ``*.egg-info`` and ``build/`` into the folder it builds, and this checkout's folders are
    on sys.path in the tests."""
    listed = _run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO).stdout
    for rel in filter(None, listed.split("\0")):
        if os.path.isfile(os.path.join(REPO, rel)):
            os.makedirs(os.path.dirname(os.path.join(dest, rel)), exist_ok=True)
            shutil.copy2(os.path.join(REPO, rel), os.path.join(dest, rel))
    return str(dest)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A copy of the checkout, and every project's wheel and sdist built from it as a release would
    (``python -m build``)."""
    tmp = tmp_path_factory.mktemp("build")
    src = _copy_of_checkout(tmp / "src")
    py = _venv(str(tmp / "tools"), "build", "setuptools>=77", "wheel")
    out = tmp / "dist"
    for folder in PROJECTS:
        # --no-isolation: the tools venv's setuptools (>=77, what the core's license field needs)
        _run([py, "-m", "build", "--no-isolation", "--sdist", "--wheel", "-o", out,
              os.path.join(src, folder)], cwd=tmp)
    return py, out, src


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_each_project_builds_a_named_versioned_wheel_and_sdist(built, tmp_path):
    py, out, _ = built
    files = sorted(os.listdir(out))
    for folder in PROJECTS:
        p = _project(folder)
        wheel = f"{p['file']}-{p['version']}-py3-none-any.whl"
        sdist = f"{p['file']}-{p['version']}.tar.gz"
        assert wheel in files and sdist in files, (folder, files)
        with zipfile.ZipFile(out / wheel) as z:
            names = sorted(n for n in z.namelist() if ".dist-info/" not in n)
            meta = z.read(f"{p['file']}-{p['version']}.dist-info/METADATA").decode()
        assert f"Name: {p['name']}\n" in meta and f"Version: {p['version']}\n" in meta
        assert names and not any(n.startswith(("tests/", "examples/", "bench/")) for n in names), names
        # the sdist holds what the wheel needs: a wheel built from it has the same files
        with tarfile.open(out / sdist) as t:
            t.extractall(tmp_path / folder.replace("/", "_"), filter="data")
        src = tmp_path / folder.replace("/", "_") / f"{p['file']}-{p['version']}"
        again = tmp_path / "again"
        _run([py, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", again, src],
             cwd=tmp_path)
        with zipfile.ZipFile(again / wheel) as z:
            assert sorted(n for n in z.namelist() if ".dist-info/" not in n) == names, folder
    with zipfile.ZipFile(out / "rewardhub-0.1.0-py3-none-any.whl") as z:
        assert {"rewardhub/py.typed", "rewardhub/_commands/_new_template.py"} <= set(z.namelist())
    rg = _project("plugins/rewardhub-reasoning-gym")
    with zipfile.ZipFile(out / f"{rg['file']}-{rg['version']}-py3-none-any.whl") as z:
        assert any(n.startswith("rewardhub_reasoning_gym/datasets-") for n in z.namelist())


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_pip_install_from_wheels_path_and_git_url(built, tmp_path):
    _, out, src = built
    core, code = _project("."), _project("plugins/rewardhub-code")

    def check(py, *, with_code: bool) -> None:
        version = _run([py, "-m", "rewardhub", "--version"], cwd=tmp_path).stdout.strip()
        assert version == f"rewardhub {core['version']}"
        listed = _run([py, "-m", "rewardhub", "list"], cwd=tmp_path).stdout
        assert "exact_match" in listed
        assert (f"rewardhub-code {code['version']}" in listed) == with_code, listed
        where = _run([py, "-c", "import rewardhub; print(rewardhub.__file__)"], cwd=tmp_path).stdout
        assert where.startswith(str(tmp_path)), where  # the installed copy, not this checkout

    # the wheels: the core and a plugin in one command (the plugin requires the core)
    py = _venv(str(tmp_path / "wheels"), str(out / f"rewardhub-{core['version']}-py3-none-any.whl"),
               str(out / f"{code['file']}-{code['version']}-py3-none-any.whl"))
    check(py, with_code=True)
    # the repository's path (its copy)
    py = _venv(str(tmp_path / "path"), src)
    check(py, with_code=False)
    # a git URL (a file:// one: the committed tree), a plugin from its subdirectory beside it (pip's
    # `name @ URL` form wants a host in the URL, as an https one has)
    url = f"git+file://{REPO}"
    py = _venv(str(tmp_path / "git"), url, f"{url}#subdirectory=plugins/rewardhub-code")
    check(py, with_code=True)
