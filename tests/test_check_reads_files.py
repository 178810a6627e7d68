"""`rewardhub check` runs nothing: a `path:` or `module:` reward file is parsed, not imported, and what it
says about the function (exists, parameters, async, `@reward` metadata) comes from the source."""

from __future__ import annotations

import json

import pytest

SIDE_EFFECT = """
import pathlib, sys
pathlib.Path({marker!r}).write_text("the module code ran")
print("printed at import")
"""


def _reward(tmp_path, body: str, name: str = "r.py") -> str:
    marker = tmp_path / "RAN"
    path = tmp_path / name
    path.write_text(SIDE_EFFECT.format(marker=str(marker)) + body)
    return str(path)


def _config(tmp_path, term: str) -> str:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("reward:\n  rewards:\n    - " + term.replace("\n", "\n      ") + "\n")
    return str(cfg)


def test_a_path_reward_is_read_not_imported(cli, tmp_path):
    path = _reward(tmp_path, """
import rewardhub

@rewardhub.reward(timeout_s=3, executor="process", pure=True)
async def compute_score(data_source, solution_str, ground_truth, extra_info=None, *,
                        scale: float = sys.maxsize):
    "Doc line."
    return 1.0
""")
    res = cli("check", _config(tmp_path, f"path: {path}\nkwargs: {{scale: 2, scal: 3}}"), "--json")
    assert not (tmp_path / "RAN").exists() and "printed at import" not in res.stdout + res.stderr
    out = json.loads(res.stdout)
    assert res.returncode == 1
    assert out["problems"] == [
        "reward.rewards[0].kwargs: compute_score has no parameter 'scal' (did you mean "
        "'scale'?); it takes: scale, solution_str"
    ]
    term = out["terms"][0]
    assert (term["timeout_s"], term["executor"], term["pure"]) == (3, "process", True)
    assert "async" in term["capabilities"]


def test_a_missing_function_names_those_the_file_has(cli, tmp_path):
    path = _reward(tmp_path, "def score_a(response):\n    return 1.0\nclass Other:\n    pass\n")
    res = cli("check", _config(tmp_path, f"path: {path}"), "--json")
    assert res.returncode == 1 and not (tmp_path / "RAN").exists()
    (problem,) = json.loads(res.stdout)["problems"]
    assert problem.startswith(
        f"reward.rewards[0]: {path} has no function 'compute_score' (it defines: score_a, Other)"
    )


def test_a_syntax_error_is_a_problem_with_its_line(cli, tmp_path):
    path = _reward(tmp_path, "def compute_score(response:\n    return 1.0\n")
    res = cli("check", _config(tmp_path, f"path: {path}"), "--json")
    (problem,) = json.loads(res.stdout)["problems"]
    assert problem.startswith(f"reward.rewards[0]: {path}, line 5: not valid Python")


def test_a_function_bound_by_import_is_a_note_not_an_import(cli, tmp_path):
    path = _reward(tmp_path, "from os.path import join as compute_score\n")
    res = cli("check", _config(tmp_path, f"path: {path}"), "--json")
    out = json.loads(res.stdout)
    assert res.returncode == 0 and not (tmp_path / "RAN").exists(), out
    assert any("is not a plain 'def' in the file" in n for n in out["notes"])


def test_a_module_term_is_read_not_imported(cli, tmp_path):
    pkg = tmp_path / "mypkg_check_static"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(SIDE_EFFECT.format(marker=str(tmp_path / "RAN")))
    _reward(
        tmp_path, "def fn(*, response, k=1, **kw):\n    return 1.0\n", name="mypkg_check_static/rewards.py"
    )
    res = cli("check", _config(tmp_path, "module: mypkg_check_static.rewards\nfunction: fn\nkwargs: {k: 2}"),
              env={"PYTHONPATH": str(tmp_path)})
    assert res.returncode == 0, res.stderr
    assert not (tmp_path / "RAN").exists()


def test_check_help_says_files_are_read(cli):
    res = cli("check", "--help")
    assert "nothing is run" in res.stdout and "read, not imported" in res.stdout


@pytest.mark.parametrize("cmd", ["score"])
def test_score_still_imports_the_file(cli, tmp_path, cmd):
    path = _reward(tmp_path, "def compute_score(*, response, **kw):\n    return 2.0\n")
    data = tmp_path / "d.jsonl"
    data.write_text('{"response": "a"}\n')
    res = cli(cmd, _config(tmp_path, f"path: {path}"), str(data))
    assert res.returncode == 0 and json.loads(res.stdout.splitlines()[0])["score"] == 2.0, res.stderr
    assert (tmp_path / "RAN").exists() and "printed at import" in res.stderr  # never among the rows
