"""A plugin command or the entry-point cache can be wrong: the CLI says which (one WARNING naming the plugin's
distribution, or the cache file) and keeps working."""

from __future__ import annotations

import json
import os

import pytest

from rewardhub.testing import write_distribution

GOOD = """
NAME = "hello"
HELP = "say hello"
def add_arguments(parser):
    parser.add_argument("--who", default="world")
def run(args):
    print(f"hello {args.who}")
    return 0
"""


def _env(tmp_path, cache: bool = False):
    env = {"PYTHONPATH": str(tmp_path / "site"), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    if not cache:
        env["REWARDHUB_NO_CACHE"] = "1"
    else:
        env["REWARDHUB_NO_CACHE"] = ""
    return env


@pytest.mark.parametrize("case", ["named_score", "named_like_an_option", "no_run", "options_clash", "twice"])
def test_a_bad_command_plugin_is_a_warning_naming_it(cli, tmp_path, case):
    modules = {"good_cmd": GOOD}
    eps = {"hello": "good_cmd"}
    if case == "named_score":
        modules["bad_cmd"] = GOOD.replace('"hello"', '"score"')
    elif case == "named_like_an_option":
        modules["bad_cmd"] = GOOD.replace('"hello"', '"--help"')
    elif case == "no_run":
        modules["bad_cmd"] = GOOD.replace('"hello"', '"other"').replace("def run(args)", "def walk(args)")
    elif case == "options_clash":
        modules["bad_cmd"] = GOOD.replace('"hello"', '"other"').replace('"--who", default="world")',
                                                                         '"-h")')
    elif case == "twice":
        modules["bad_cmd"] = GOOD
    eps["bad"] = "bad_cmd"
    write_distribution(tmp_path / "site", "bad-plugin", "1.2", {"rewardhub.commands": eps}, modules)
    env = _env(tmp_path)
    helped = cli("--help", env=env)
    assert helped.returncode == 0 and "Traceback" not in helped.stderr, helped.stderr
    assert "score" in helped.stdout and "hello" in helped.stdout
    warning = [
        line
        for line in helped.stderr.splitlines()
        if line.startswith("WARNING: command plugin bad-plugin 1.2")
    ]
    assert len(warning) == 1, helped.stderr
    assert cli("hello", "--who", "you", env=env).stdout == "hello you\n"
    listed = cli("list", env=env)
    assert listed.returncode == 0 and "Traceback" not in listed.stderr, listed.stderr
    if case == "options_clash":
        res = cli("other", env=env)
        assert res.returncode == 1 and res.stderr.startswith("WARNING: command plugin bad-plugin") and \
            "ERROR: command 'other' from bad-plugin" in res.stderr


@pytest.mark.parametrize(
    "content",
    [
        "[]",
        "{}",
        "null",
        '{"state": [], "eps": {"a": 1}}',
        '{"state": [], "eps": ["abcde"]}',
        '{"state": [], "eps": [[1, 2, 3, 4, 5]]}',
        '{"state": "x", "eps": []}',
        "{not json",
        "\u00e9\u00e9",
    ],
)
def test_a_malformed_entry_point_cache_is_a_warning_and_rewritten(cli, tmp_path, content):
    from rewardhub import _discovery

    env = _env(tmp_path, cache=True)
    first = cli("list", "--json", env=env)
    assert first.returncode == 0, first.stderr
    (cache,) = [os.path.join(r, f) for r, _, fs in os.walk(tmp_path / "cache") for f in fs
                if f.startswith("entry-points-")]  # (the source facts' file is beside it)
    with open(cache, "w", encoding="latin-1") as f:
        f.write(content)
    res = cli("list", "--json", env=env)
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    assert res.stderr.startswith(f"WARNING: the entry-point cache {cache} cannot be used"), res.stderr
    assert json.loads(res.stdout) == json.loads(first.stdout)
    again = cli("list", "--json", env=env)  # the file was rewritten: no second warning
    assert again.returncode == 0 and "WARNING" not in again.stderr, again.stderr
    with open(cache, encoding="utf-8") as f:
        assert _discovery._cached_eps(json.load(f)) is not None
