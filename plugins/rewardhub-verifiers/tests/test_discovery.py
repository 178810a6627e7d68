"""Finding installed verifiers environments (issue 42 §6, 43 §6): one that cannot be read does not hide
the others, a ``top_level.txt`` path walks nothing, a large data module is not read, weights are listed
as written, environments that do not declare ``verifiers`` are found, and ``list`` and ``show`` agree on
what a reward reads. The environments are installed as pip lays them out (dist-info, RECORD); a stub
``verifiers`` package makes verifiers importable (nothing is imported: the source is read)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REWARD = ("import verifiers.v1 as vf\n\n\nclass T(vf.Task):\n    @vf.reward(weight={w})\n"
          "    async def {name}(self, trace):\n        return 1.0\n")


def install(site: Path, dist: str, files: dict[str, str | bytes], *, requires_verifiers: bool = True,
            top_level: str | None = None) -> None:
    """A distribution as pip installs it: its files, and a dist-info with METADATA and RECORD."""
    info = site / f"{dist.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    meta = f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n"
    meta += "Requires-Dist: verifiers>=0.4\n" if requires_verifiers else "Requires-Dist: datasets\n"
    (info / "METADATA").write_text(meta + "\nA long description.\n")
    record = []
    for rel, body in files.items():
        path = site / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body if isinstance(body, bytes) else body.encode())
        record.append(f"{rel},sha256=x,{path.stat().st_size}")
    if top_level is not None:
        (info / "top_level.txt").write_text(top_level)
        record.append(f"{info.name}/top_level.txt,,")
    (info / "RECORD").write_text("\n".join(record + [f"{info.name}/RECORD,,"]) + "\n")


@pytest.fixture()
def site(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    (site / "verifiers").mkdir(parents=True)
    (site / "verifiers" / "__init__.py").write_text("raise ImportError('a stub: never imported')\n")
    return site


def rewardhub(site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
           "REWARDHUB_NO_CACHE": "1"}
    return subprocess.run([sys.executable, "-m", "rewardhub", *args], env=env, capture_output=True,
                          text=True, timeout=120)


def listed(site: Path) -> dict[str, dict[str, object]]:
    done = rewardhub(site, "list", "--json")
    assert done.returncode == 0, done.stderr
    return {r["name"]: r for r in json.loads(done.stdout) if str(r["name"]).startswith("verifiers.")}


@pytest.mark.timeout(300)
def test_an_environment_that_cannot_be_parsed_is_broken_and_hides_no_other(site: Path) -> None:
    install(site, "vf-good", {"vf_good/__init__.py": REWARD.format(w=1.0, name="ok")})
    install(site, "vf-nul", {"vf_nul/__init__.py": REWARD.format(w=1.0, name="a"),
                             "vf_nul/data.py": b"X = 1\x00\n"})
    # Python's parser raises RecursionError here (not a SyntaxError)
    install(site, "vf-deep", {"vf_deep/__init__.py": "x = " + "1+" * 100_000 + "1\n"})
    rows = listed(site)
    assert rows["verifiers.vf_good"]["status"] == "ok" and rows["verifiers.vf_good.ok"]["status"] == "ok"
    for module, dist in (("vf_nul", "vf-nul"), ("vf_deep", "vf-deep")):
        row = rows[f"verifiers.{module}"]
        assert row["status"] == "broken", row
        assert row["dist"] == dist and "cannot be parsed" in str(row["error"]), row
    assert "RecursionError" in str(rows["verifiers.vf_deep"]["error"])


@pytest.mark.timeout(300)
def test_a_top_level_path_walks_nothing(site: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "far.py").write_text(REWARD.format(w=1.0, name="from_outside"))
    install(site, "vf-paths", {"vf_paths/__init__.py": REWARD.format(w=1.0, name="own")},
            top_level=f"{outside}\n../outside\nvf_paths\n")
    rows = listed(site)
    assert "verifiers.vf_paths.own" in rows
    assert not [name for name in rows if "from_outside" in name or "/" in name], sorted(rows)
    assert "not a module name" in str(rows["verifiers.vf_paths"]["summary"])


@pytest.mark.timeout(300)
def test_a_large_data_module_is_not_read(site: Path) -> None:
    # over the 1 MB bound: a reward in it is not listed (its size, from the RECORD, says it is data)
    big = REWARD.format(w=1.0, name="in_data") + "DATA = [\n" + "    'row',\n" * 200_000 + "]\n"
    install(site, "vf-big", {"vf_big/__init__.py": REWARD.format(w=1.0, name="own"), "vf_big/data.py": big})
    rows = listed(site)
    assert "verifiers.vf_big.own" in rows and "verifiers.vf_big.in_data" not in rows
    assert "data.py (2.2 MB) is not read" in str(rows["verifiers.vf_big"]["summary"])


@pytest.mark.timeout(300)
def test_weights_are_listed_as_written(site: Path) -> None:
    install(site, "vf-weights", {"vf_weights/__init__.py": REWARD.format(w=-0.5, name="neg")
                                 + REWARD.format(w="W", name="computed").split("\n", 1)[1]})
    rows = listed(site)
    assert "rubric weight -0.5)" in str(rows["verifiers.vf_weights.neg"]["summary"])
    assert "rubric weight set at run time" in str(rows["verifiers.vf_weights.computed"]["summary"])
    assert "neg x-0.5" in str(rows["verifiers.vf_weights"]["summary"])


@pytest.mark.timeout(300)
def test_an_environment_that_does_not_declare_verifiers_is_found(site: Path) -> None:
    """verifiers' own environments (reverse_text, gsm8k) require only datasets; their modules import
    verifiers. One that imports it but has no reward is listed as broken, saying so."""
    install(site, "reverse-text", {"reverse_text/__init__.py": "from .taskset import T\n__all__ = ['T']\n",
                                   "reverse_text/taskset.py": REWARD.format(w=1.0, name="lcs")},
            requires_verifiers=False)
    install(site, "vf-none", {"vf_none/__init__.py": "import verifiers.v1 as vf\n"}, requires_verifiers=False)
    install(site, "not-an-env", {"not_an_env/__init__.py": "import json\n"}, requires_verifiers=False)
    rows = listed(site)
    assert rows["verifiers.reverse_text.lcs"]["status"] == "ok"
    assert rows["verifiers.reverse_text"]["dist"] == "reverse-text"
    assert rows["verifiers.vf_none"]["status"] == "broken"
    assert "no @vf.reward method" in str(rows["verifiers.vf_none"]["error"])
    assert not [name for name in rows if "not_an_env" in name]


@pytest.mark.timeout(300)
def test_list_and_show_agree_on_what_a_reward_reads(site: Path) -> None:
    install(site, "vf-reads", {"vf_reads/__init__.py": REWARD.format(w=1.0, name="r")})
    rows = listed(site)
    for name in ("verifiers.vf_reads", "verifiers.vf_reads.r"):
        shown = rewardhub(site, "show", name, "--json")
        assert shown.returncode == 0, shown.stderr
        assert rows[name]["reads"] == json.loads(shown.stdout)["reads"] == "trajectory"


@pytest.mark.timeout(300)
def test_without_verifiers_list_imports_no_scanner(site: Path) -> None:
    """Where verifiers is not importable no environment can be scored: `rewardhub list` lists none and
    does not import the scanner (csv, its patterns: a share of every start-up), an environment installed
    or not."""
    install(site, "vf-there", {"vf_there/__init__.py": REWARD.format(w=1.0, name="r")})
    probe = ("import io, sys, contextlib\nsys.modules['verifiers'] = None\nfrom rewardhub.cli import main\n"
             "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
             "    assert main(['list', '--json']) == 0\n"
             "print('verifiers.' in out.getvalue(), 'rewardhub_verifiers._scan' in sys.modules)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
           "REWARDHUB_NO_CACHE": "1"}
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False"]
    assert "verifiers.vf_there.r" in listed(site)  # importable again: the same environment is listed
