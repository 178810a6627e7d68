"""The registry and installed reward packages: two packages registering one name break only the configs
that use it; one plugin registering a name twice; the stand-in for no reward section."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

import rewardhub
from rewardhub import RewardSpec
from rewardhub.errors import DuplicateRewardError
from rewardhub.testing import make_registry


def _install_reward_package(tmp_path, dist: str, package: str, value: float, group: str):
    """pip-install (into a folder of its own) a package that registers the reward ``accuracy``."""
    src = tmp_path / f"src-{dist}"
    (src / package).mkdir(parents=True)
    body = textwrap.dedent(f'''
        import rewardhub

        def accuracy(*, response, **kwargs):
            """{dist}'s accuracy."""
            return {value}

        @rewardhub.hookimpl
        def rewardhub_register_rewards():
            return [accuracy]
    ''')
    (src / package / "__init__.py").write_text(body)
    ep = f'accuracy = "{package}:accuracy"' if group == "rewardhub.rewards" else f'{package} = "{package}"'
    (src / "pyproject.toml").write_text(textwrap.dedent(f'''
        [build-system]
        requires = ["setuptools"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "{dist}"
        version = "1.0"
        [project.entry-points."{group}"]
        {ep}
        [tool.setuptools]
        packages = ["{package}"]
    '''))
    target = tmp_path / f"site-{dist}"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(src)], check=True, capture_output=True)
    return target


@pytest.fixture(scope="module")
def two_accuracies(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("conflict")
    sites = [_install_reward_package(tmp, "acc-one", "acc_one", 1.0, "rewardhub"),
             _install_reward_package(tmp, "acc-two", "acc_two", 2.0, "rewardhub.rewards")]
    data = tmp / "data.jsonl"
    data.write_text(json.dumps({"prompt": "p", "response": "r", "ground_truth": "r"}) + "\n")
    return {"PYTHONPATH": os.pathsep.join(map(str, sites)), "REWARDHUB_NO_CACHE": "1"}, tmp, data


def _config(tmp, name, rewards, plugins=None):
    path = tmp / f"{name}.json"
    path.write_text(json.dumps({"reward": {"rewards": rewards, **({"plugins": plugins} if plugins else {})}}))
    return str(path)


@pytest.mark.timeout(300)
def test_two_packages_registering_one_name_break_only_configs_that_use_it(cli, two_accuracies):
    env, tmp, data = two_accuracies
    res = cli("list", "--json", env=env)
    assert res.returncode == 0, res.stderr
    by = {r["name"]: r for r in json.loads(res.stdout)}
    assert by["accuracy"]["status"] == "conflict"
    assert any("acc-one 1.0" in s for s in by["accuracy"]["sources"])
    assert any("acc-two 1.0" in s for s in by["accuracy"]["sources"])
    assert by["exact_match"]["status"] == "ok" and by["math_verify"]["status"] == "ok"
    table = cli("list", env=env)
    assert table.returncode == 0 and "conflict" in table.stdout and "1 conflicting" in table.stdout
    shown = cli("show", "accuracy", env=env)  # names both sources instead of picking one
    assert shown.returncode != 0 and "Traceback" not in shown.stderr and "acc-one" in shown.stderr \
        and "acc-two" in shown.stderr
    # a config that does not use the name is untouched
    other = _config(tmp, "other", [{"name": "exact_match"}])
    assert cli("score", other, str(data), env=env).returncode == 0
    # one that uses it fails in one line, naming both packages and how to choose
    uses = _config(tmp, "uses", [{"name": "accuracy"}])
    res = cli("score", uses, str(data), env=env)
    assert res.returncode != 0 and "Traceback" not in res.stderr
    err = res.stderr.strip().splitlines()
    assert err[0].startswith("ERROR: reward 'accuracy' is registered by 2 installed sources")
    assert "acc-one" in err[0] and "acc-two" in err[0]
    assert (
        "reward.plugins.prefer: {accuracy: acc-one}" in res.stderr
        and "reward.plugins.block: [acc-two]" in res.stderr
    )
    # the config chooses: prefer one, or block the other
    for plugins, want in (
        ({"prefer": {"accuracy": "acc-two"}}, 2.0),
        ({"prefer": {"accuracy": "acc_one"}}, 1.0),
        ({"block": ["acc-two"]}, 1.0),
    ):
        cfg = _config(tmp, "chosen", [{"name": "accuracy"}], plugins)
        res = cli("score", cfg, str(data), env=env)
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stdout.splitlines()[0])["score"] == want
    bad = _config(tmp, "bad", [{"name": "accuracy"}], {"prefer": {"accuracy": "acc-three"}})
    res = cli("score", bad, str(data), env=env)
    assert (
        res.returncode != 0 and "matches 0 of the sources" in res.stderr and "acc-one, acc-two" in res.stderr
    )


def test_one_plugin_registering_a_name_twice_is_still_an_error():
    def twice(*, response, **kw):
        return 1.0

    class Twice:
        @rewardhub.hookimpl
        def rewardhub_register_rewards(self):
            return [twice, RewardSpec(name="twice", target="rewardhub.builtin.match:exact_match")]

    with pytest.raises(DuplicateRewardError, match="reward.plugins.block"):
        make_registry(Twice())


def test_the_registrys_stand_in_for_no_reward_section_is_the_schemas_default():
    """build_registry(None) reads its own copy of the defaults (so `rewardhub list` need not import the
    schema): it must say what the schema's default section says."""
    from rewardhub.config.schema import validate_reward
    from rewardhub.registry import _reward_section

    default, stand_in = validate_reward(None), _reward_section(None)
    for key in ("autoload", "load", "block"):
        assert getattr(stand_in.plugins, key) == getattr(default.plugins, key)
    assert dict(stand_in.plugins.prefer) == dict(default.plugins.prefer)
    assert tuple(stand_in.rewards) == default.rewards
