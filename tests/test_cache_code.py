"""The reward cache never hits an entry of code edited without a new version (issue 42 §2): a helper
module a reward file imports, and an editable install (its source outside site-packages, as
``pip install -e`` leaves it). Real ``rewardhub score --cache`` runs in fresh processes."""

from __future__ import annotations

import json
import os
from pathlib import Path

from rewardhub.testing import write_distribution

REWARD = "from helper import bonus\n\ndef scored(*, response):\n    return float(len(response)) + bonus()\n"


def _run(cli, tmp_path: Path, cfg: dict[str, object], env: dict[str, str] | None = None) -> list[float]:
    (tmp_path / "cfg.json").write_text(json.dumps({"reward": cfg}))
    (tmp_path / "data.jsonl").write_text("".join(json.dumps({"prompt": "p", "response": r}) + "\n"
                                                for r in ("a", "bb")))
    out = tmp_path / "out.jsonl"
    res = cli("score", str(tmp_path / "cfg.json"), str(tmp_path / "data.jsonl"), "-o", str(out),
              "--cache", str(tmp_path / "cache"), cwd=tmp_path, env=env)
    assert res.returncode == 0, res.stderr
    return [json.loads(line)["score"] for line in out.read_text().splitlines()]


def test_an_edited_helper_module_of_a_reward_file_is_another_key(cli, tmp_path):
    (tmp_path / "r.py").write_text(REWARD)
    (tmp_path / "helper.py").write_text("def bonus():\n    return 0.0\n")
    cfg = {"rewards": [{"path": "r.py", "function": "scored", "cache": True}]}
    env = {"PYTHONPATH": f"{tmp_path}:{os.environ.get('PYTHONPATH', '')}"}
    assert _run(cli, tmp_path, cfg, env) == [1.0, 2.0]
    (tmp_path / "helper.py").write_text("def bonus():\n    return 10.0\n")
    assert _run(cli, tmp_path, cfg, env) == [11.0, 12.0]


def test_an_edited_editable_install_is_another_key(cli, tmp_path):
    """The dist's metadata in site-packages, its source in the project folder (on the path as an
    editable install's .pth puts it); the same version before and after the edit."""
    site, src = tmp_path / "lib" / "site-packages", tmp_path / "project" / "src"
    info = write_distribution(site, "my-rewards", "0.1.0",
                              entry_points={"rewardhub.rewards": {"scored": "my_rewards.core:scored"}})
    (info / "direct_url.json").write_text(json.dumps({"url": src.as_uri(), "dir_info": {"editable": True}}))
    (src / "my_rewards").mkdir(parents=True)
    (src / "my_rewards" / "__init__.py").write_text("")
    (src / "my_rewards" / "core.py").write_text(REWARD.replace("from helper", "from .helper"))
    (src / "my_rewards" / "helper.py").write_text("def bonus():\n    return 0.0\n")
    env = {"PYTHONPATH": f"{site}:{src}:{os.environ.get('PYTHONPATH', '')}", "REWARDHUB_NO_CACHE": "1"}
    cfg = {"rewards": [{"name": "scored", "cache": True}]}
    assert _run(cli, tmp_path, cfg, env) == [1.0, 2.0]
    (src / "my_rewards" / "helper.py").write_text("def bonus():\n    return 5.0\n")
    assert _run(cli, tmp_path, cfg, env) == [6.0, 7.0]
    (src / "my_rewards" / "core.py").write_text(REWARD.replace("from helper", "from .helper") + "# edit\n")
    assert _run(cli, tmp_path, cfg, env) == [6.0, 7.0]  # called again (a new key): the same numbers


def test_installed_code_is_known_by_its_version_and_the_identity_is_computed_once_per_term(
        tmp_path, monkeypatch):
    import sys

    from rewardhub.execution import Runner
    from rewardhub.execution import _codehash

    site = tmp_path / "lib" / "site-packages"
    write_distribution(site, "plain-rewards", "1.0",
                       entry_points={"rewardhub.rewards": {"plain_len": "plain_mod:plain_len"}},
                       modules={"plain_mod": "def plain_len(*, response):\n"
                                             "    return float(len(response))\n"})
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("REWARDHUB_NO_CACHE", "1")
    walked: list[str] = []
    real = _codehash.code_digest

    def counting(path: str, module: str, **kw: object) -> str | None:
        walked.append(module)
        return real(path, module)

    monkeypatch.setattr(_codehash, "code_digest", counting)
    assert _codehash.is_local(str(site / "plain_mod.py"), _codehash.installed_roots()) is False
    samples = [{"prompt": "p", "response": "x" * (k % 7)} for k in range(300)]
    with Runner.from_config({"rewards": [{"name": "plain_len", "cache": True}]}) as runner:
        for _ in range(3):
            assert runner.score(samples).scores == [float(k % 7) for k in range(300)]
    assert walked == ["plain_mod"]  # once for the run, not per sample or batch
    sys.modules.pop("plain_mod", None)
