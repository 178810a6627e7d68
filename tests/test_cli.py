"""The CLI as a user runs it: version, list (table, --json, --plugins), show, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from rewardhub.cli import main
from rewardhub.testing import write_distribution

LIST_KEYS = {"name", "source", "dist", "version", "target", "summary", "kind", "status", "error"}


def test_version_loads_no_plugins(cli):
    code = ("import sys; from rewardhub.cli import main; main(['--version']); "
            "print('rewardhub_math' in sys.modules, 'rewardhub_reasoning_gym' in sys.modules, "
            "'rewardhub.builtin.format' in sys.modules)")
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split("\n")
    assert out[0] == "rewardhub 0.1.0"
    assert out[1] == "False False False"


def test_list_json_shows_first_party_plugins(cli):
    res = cli("list", "--json")
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    assert [r["name"] for r in rows] == sorted(r["name"] for r in rows)
    assert all(LIST_KEYS <= set(r) for r in rows)
    by = {r["name"]: r for r in rows}
    assert (by["math_verify"]["source"], by["math_verify"]["dist"], by["math_verify"]["version"]) == \
        ("entry-point", "rewardhub-math", "0.1.0")
    assert by["math_verify"]["summary"].startswith("1.0 when the response's final answer")
    assert by["reasoning_gym.basic_arithmetic"]["source"] == "plugin"
    assert by["reasoning_gym.basic_arithmetic"]["dist"] == "rewardhub-reasoning-gym"
    assert by["exact_match"]["source"] == "builtin" and by["exact_match"]["status"] == "ok"


def test_list_table_and_plugins(cli):
    res = cli("list")
    assert res.returncode == 0
    assert (
        "math_verify" in res.stdout and "rewardhub-math 0.1.0" in res.stdout and "fingerprint" in res.stdout
    )
    res = cli("list", "--plugins", "--json")
    plugins = {p["name"]: p for p in json.loads(res.stdout)}
    assert plugins["reasoning_gym"]["hooks"] == ["rewardhub_register_rewards"]
    assert plugins["reasoning_gym"]["dist"] == "rewardhub-reasoning-gym"


def _build_outside_package(tmp_path):
    src = tmp_path / "src"
    (src / "outside_rewards").mkdir(parents=True)
    (src / "outside_rewards" / "__init__.py").write_text(textwrap.dedent('''
        def polite(*, response, **kwargs):
            """1.0 when the response says please."""
            return float("please" in response.lower())
    '''))
    (src / "pyproject.toml").write_text(textwrap.dedent('''
        [build-system]
        requires = ["setuptools"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "outside-rewards"
        version = "3.1.4"
        [project.entry-points."rewardhub.rewards"]
        polite = "outside_rewards:polite"
        ghost = "outside_rewards_missing.mod:fn"
        [tool.setuptools]
        packages = ["outside_rewards"]
    '''))
    target = tmp_path / "target"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(src)], check=True, capture_output=True)
    return target


def test_outside_package_on_pythonpath(cli, tmp_path):
    target = _build_outside_package(tmp_path)
    env = {"PYTHONPATH": str(target)}
    res = cli("list", "--json", env=env)
    assert res.returncode == 0, res.stderr
    by = {r["name"]: r for r in json.loads(res.stdout)}
    assert by["polite"]["dist"] == "outside-rewards" and by["polite"]["version"] == "3.1.4"
    assert by["polite"]["status"] == "ok" and by["polite"]["summary"] == "1.0 when the response says please."
    assert by["ghost"]["status"] == "broken" and "outside_rewards_missing.mod" in by["ghost"]["error"]
    assert by["math_verify"]["status"] == "ok"
    res = cli("show", "polite", env=env)
    assert (
        res.returncode == 0
        and "polite(*, response, **kwargs)" in res.stdout
        and "outside-rewards" in res.stdout
    )


def test_listing_200_entry_points_imports_none(cli, tmp_path):
    marker = tmp_path / "imported"
    marker.mkdir()
    for i in range(200):
        write_distribution(
            tmp_path / "site",
            f"gen-reward-{i}",
            "1.0",
            {"rewardhub.rewards": {f"gen_{i}": f"gen_mod_{i}:score"}},
            {
                f"gen_mod_{i}": f"open({str(marker / str(i))!r}, 'w').close()\n"
                f"def score(**kw):\n    '''Generated reward {i}.'''\n    return 1.0\n"
            },
        )
    res = cli("list", "--json", env={"PYTHONPATH": str(tmp_path / "site")})
    assert res.returncode == 0, res.stderr
    names = {r["name"] for r in json.loads(res.stdout)}
    assert {f"gen_{i}" for i in range(200)} <= names
    assert list(marker.iterdir()) == []


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["show", "math_verfy"], 1, "ERROR: unknown reward 'math_verfy'"),
        (["list", "--bogus"], 2, "ERROR: unrecognized arguments: --bogus"),
        (["nosuchcommand"], 2, "ERROR: argument COMMAND: invalid choice"),
    ],
)
def test_errors_are_one_line_with_exit_code(capsys, argv, code, message):
    assert main(argv) == code
    err = capsys.readouterr().err
    assert err.startswith(message)
    assert "Traceback" not in err


def test_unknown_reward_names_the_interpreter_and_only_close_names(capsys):
    """Not the first 30 of 116 names: the close ones, where it looked, and how to install there."""
    assert main(["show", "math_verfy"]) == 1
    err = capsys.readouterr().err
    assert "did you mean: 'math_verify'?" in err
    assert "reasoning_gym." not in err and "exact_match" not in err
    assert f"rewards installed for {sys.executable} (virtual environment {sys.prefix})" in err
    assert f"{sys.executable} -m pip install <plugin>" in err and "`rewardhub list`" in err


def test_show_prints_signature_and_policy(capsys):
    assert main(["show", "math_verify"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("math_verify(*, response")
    assert "'executor': 'process'" in out and "rewardhub-math" in out


def test_python_m_and_console_script_agree():
    exe = os.path.join(os.path.dirname(sys.executable), "rewardhub")
    a = subprocess.run([exe, "list", "--json"], capture_output=True, text=True, check=True).stdout
    b = subprocess.run([sys.executable, "-m", "rewardhub", "list", "--json"], capture_output=True, text=True,
                       check=True).stdout
    assert a == b


def test_exit_stays_quiet_with_a_nanobind_extension_loaded():
    """Freezing the GC on the way out would make triton's nanobind bindings (loaded by torch once
    vLLM is installed) print pages of "leaked" objects at exit; the CLI leaves them to the GC then."""
    pytest.importorskip("triton._C.libtriton")
    code = "import sys, triton._C.libtriton; sys.argv = ['rewardhub', '--version']\n" \
           "from rewardhub.cli import main; main()"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stdout.startswith("rewardhub ")
    assert "leaked" not in res.stderr
