"""Every entry point reads config through the one loader, so legacy keys can never be skipped.

The bug this guards against: a trainer entry point that forgot the legacy migration, so a user's
``custom_reward_function`` was silently not registered.
"""

from __future__ import annotations

import contextlib
import json
import warnings
from importlib.metadata import entry_points

import pytest

import rewardhub.config.loader as loader
from rewardhub.cli import build_parser
from rewardhub.cli import main
from rewardhub.errors import RewardhubDeprecationWarning
from rewardhub.errors import UsageError

#: subcommands that read no config at all (they only look at the installed registry, write a new package, or
#: read grader files: OpenAI's JSON, no reward: section)
CONFIG_FREE = {"list", "show", "new", "tasks", "data", "grader"}

VERL_REWARD = '''\
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    """verl's signature; 1.0 for the right final answer, 0.1 for a wrong one."""
    return 1.0 if solution_str.strip().endswith(str(ground_truth)) else 0.1
'''


class _Sentinel(UsageError):
    pass


@pytest.fixture
def sentinel_loader(monkeypatch):
    """Make the loader record its callers and stop there."""
    calls = []

    def fake(path=None, overrides=(), **kw):
        calls.append((path, list(overrides)))
        raise _Sentinel("SENTINEL: the one loader was reached")

    monkeypatch.setattr(loader, "read_and_migrate", fake)
    return calls


def subcommands() -> list[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return sorted(sub.choices)


def test_the_known_subcommands_are_all_there():
    assert {"list", "show", "migrate", "check", "score", "doctor"} <= set(subcommands())


@pytest.mark.parametrize("command", sorted(set(subcommands()) - CONFIG_FREE))
def test_every_config_reading_subcommand_goes_through_the_loader(command, sentinel_loader, tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("custom_reward_function:\n  path: r.py\n")
    data = tmp_path / "d.jsonl"
    data.write_text('{"response": "x"}\n')
    argv = {"score": [str(cfg), str(data)], "train": [str(cfg), "--output", str(tmp_path / "out")],
            "judge": ["calibrate", str(cfg), str(data)]}.get(command, [str(cfg)])
    code = main([command, *argv])
    err = capsys.readouterr().err
    assert "SENTINEL" in err, (command, err)
    assert code == 2
    assert sentinel_loader and sentinel_loader[0][0] == str(cfg)


def test_config_free_subcommands_take_no_config():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name in CONFIG_FREE:
        dests = {a.dest for a in sub.choices[name]._actions}
        assert not dests & {"config", "items", "args"}, name


def console_scripts():
    return sorted((ep.name, ep.value) for ep in entry_points(group="console_scripts")
                  if ep.value.split(".")[0].split(":")[0].startswith("rewardhub"))


def test_console_scripts_are_known():
    names = {n for n, _ in console_scripts()}
    assert "rewardhub" in names


@pytest.mark.parametrize("name,value", console_scripts())
def test_every_console_script_goes_through_the_loader(name, value, sentinel_loader, tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("custom_reward_function:\n  path: r.py\n")
    ep = next(ep for ep in entry_points(group="console_scripts") if ep.name == name)
    fn = ep.load()
    argv = ["check", str(cfg)] if name == "rewardhub" else [str(cfg), "--output", str(tmp_path / "out")]
    try:
        code = fn(argv)
    except SystemExit as exc:
        code = exc.code
    except _Sentinel:
        code = 2
    assert sentinel_loader, f"console script {name} ({value}) did not read its config through load_config"
    assert code not in (0, None)


def test_load_config_counts_and_migrates(tmp_path, monkeypatch):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("custom_reward_function:\n  path: r.py\n")
    (tmp_path / "r.py").write_text(VERL_REWARD)
    calls = []
    real = loader.read_and_migrate
    monkeypatch.setattr(loader, "read_and_migrate", lambda *a, **k: calls.append(a) or real(*a, **k))
    with pytest.warns(RewardhubDeprecationWarning, match="custom_reward_function.path"):
        whole = loader.load_config(str(cfg))
    assert len(calls) == 1
    term = whole.reward.rewards[0]
    assert term.path == str(tmp_path / "r.py") and term.function == "compute_score"


def test_a_verl_reward_file_named_by_legacy_keys_scores_through_score(cli, tmp_path):
    (tmp_path / "recipe").mkdir()
    (tmp_path / "recipe" / "my_reward.py").write_text(VERL_REWARD)
    rows = [{"prompt": "1+1?", "response": "it is 2", "ground_truth": "2", "data_source": "toy"},
            {"prompt": "2+2?", "response": "it is 5", "ground_truth": "4", "data_source": "toy"}]
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    script = tmp_path / "run.sh"
    script.write_text(
        "python3 -m verl.trainer.main_ppo \\\n    custom_reward_function.path=recipe/my_reward.py \\\n"
        "    trainer.total_epochs=1\n"
    )
    out = tmp_path / "out.jsonl"
    # the launch script itself as the config, and the same keys typed as overrides to an empty config
    (tmp_path / "empty.yaml").write_text("{}\n")
    for args in (
        [str(script), str(data)],
        ["empty.yaml", str(data), "custom_reward_function.path=recipe/my_reward.py"],
    ):
        r = cli("score", *args, "-o", str(out), "--no-progress", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        scored = [json.loads(line) for line in out.read_text().splitlines()]
        assert [s["score"] for s in scored] == [1.0, 0.1]
        assert [s["rewards"] for s in scored] == [{"compute_score": 1.0}, {"compute_score": 0.1}]
        assert "legacy keys: 1 moved, 0 dropped (see `rewardhub migrate " in r.stderr  # the migration is told


def test_a_verl_reward_file_scores_through_the_runner(tmp_path):
    from rewardhub.execution import Runner

    (tmp_path / "r.py").write_text(VERL_REWARD)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("custom_reward_function:\n  path: r.py\nreward_model:\n  reward_manager: prime\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RewardhubDeprecationWarning)
        whole = loader.load_config(str(cfg))
    assert whole.reward.rewards[0].executor == "process"  # what verl's prime manager meant
    with Runner.from_config(whole.reward) as runner:
        res = runner.score([{"response": "a 3", "ground_truth": "3"}, {"response": "b", "ground_truth": "3"}])
    assert res.scores == [1.0, 0.1]


def test_dapo_overlong_penalty_scores_like_verl(tmp_path):
    """verl's DAPO: min(-(len - (max_resp_len - buffer)) / buffer * factor, 0), added to the score."""
    from rewardhub.config.overrides import apply_overrides
    from rewardhub.execution import Runner

    (tmp_path / "r.py").write_text(VERL_REWARD)
    overrides = [
        "reward_model.reward_manager=dapo",
        "+reward_model.reward_kwargs.overlong_buffer_cfg.enable=True",
        "+reward_model.reward_kwargs.overlong_buffer_cfg.len=4096",
        "+reward_model.reward_kwargs.overlong_buffer_cfg.penalty_factor=1.0",
        "+reward_model.reward_kwargs.max_resp_len=20480",
        f"custom_reward_function.path={tmp_path / 'r.py'}",
    ]
    assert apply_overrides({}, overrides)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RewardhubDeprecationWarning)
        whole = loader.load_config(None, overrides)
    lengths = [100, 16384, 18000, 20480]
    samples = [
        {"response": "x 7", "ground_truth": "7", "extra_info": {"response_length": n}} for n in lengths
    ]
    with Runner.from_config(whole.reward) as runner:
        res = runner.score(samples)
    expected = [1.0 + min(-(n - (20480 - 4096)) / 4096 * 1.0, 0.0) for n in lengths]
    assert res.scores == pytest.approx(expected)
    assert [r["overlong_penalty"] for r in res.rewards] == pytest.approx([e - 1.0 for e in expected])


class _Stop(UsageError):
    pass


@pytest.mark.parametrize("command", ["score", "check", "train", "doctor"])
def test_a_legacy_config_is_read_once_and_migrated_once(command, tmp_path, monkeypatch, capsys):
    """``score``, ``check``, ``train`` (its whole preparation in the driver, up to the run) and
    ``doctor`` (up to starting Ray): one open of the config file, one migration, one validation of
    ``reward:``."""
    import builtins

    import rewardhub.config.schema as schema
    import rewardhub.verl.shim as shim

    cfg = tmp_path / "legacy.yaml"
    cfg.write_text("custom_reward_function:\n  path: r.py\nreward_model:\n  reward_manager: naive\n")
    (tmp_path / "r.py").write_text(VERL_REWARD)
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "1+1?", "response": "2", "ground_truth": "2"}\n')
    opens, migrations, validations = [], [], []
    real_open, real_migrate, real_validate = builtins.open, shim.migrate, schema.validate_reward

    def counting_open(file, *a, **k):
        if str(file) == str(cfg):
            opens.append(file)
        return real_open(file, *a, **k)

    monkeypatch.setattr(builtins, "open", counting_open)
    monkeypatch.setattr(shim, "migrate", lambda c, *a: migrations.append(1) or real_migrate(c, *a))

    def counting_validate(r):
        if not isinstance(r, schema.RewardConfig):  # a typed section is taken as it is, never checked again
            validations.append(1)
        return real_validate(r)

    monkeypatch.setattr(schema, "validate_reward", counting_validate)
    if command == "train":
        pytest.importorskip("rewardhub_trainer")
        import rewardhub_trainer.loop as loop

        def stop(*args, **kwargs):
            raise _Stop("STOP: the trainer prepared its run")

        # the whole driver-side preparation runs (sections, rewards, model, data), up to the run itself
        monkeypatch.setattr(loop, "Run", stop)
        cfg.write_text(cfg.read_text() + "model: {tiny: {arch: qwen2}}\n")
        argv = [str(cfg), "--output", str(tmp_path / "out"), "--no-progress"]
    elif command == "doctor":
        import rewardhub.distributed._doctor as doctor

        def stop_before_ray(*args, **kwargs):
            raise _Stop("STOP: doctor prepared its setup")

        monkeypatch.setattr(doctor, "ensure_ray", stop_before_ray)
        argv = [str(cfg)]
    else:
        argv = [str(cfg), str(data), "-o", str(tmp_path / "out.jsonl")] if command == "score" else [str(cfg)]
    # one warning per legacy key (check and score tell them in one line instead)
    told_in_one_line = command in ("check", "score")
    with contextlib.nullcontext() if told_in_one_line else pytest.warns(RewardhubDeprecationWarning):
        code = main([command, *argv])
    err = capsys.readouterr().err
    assert code == (2 if command in ("train", "doctor") else 0), err
    if command in ("train", "doctor"):
        assert "STOP" in err
    assert len(opens) == 1 and len(migrations) == 1, (opens, migrations)
    assert len(validations) == 1, validations


@pytest.mark.parametrize(
    ("command", "section", "meant"),
    [("score", "rewad", "reward"), ("train", "trainr", "trainer"), ("migrate", "rewad", "reward")],
)
@pytest.mark.parametrize("where", ["file", "override"])
def test_a_misspelt_top_level_section_is_an_error(command, section, meant, where, tmp_path, capsys):
    """A top-level key that is no section is not silently ignored, for ``score``, ``train`` and
    ``migrate`` alike (a migrated config that would not load is no result)."""
    if command == "train":
        pytest.importorskip("rewardhub_trainer")
    cfg = tmp_path / "c.yaml"
    cfg.write_text("reward:\n  rewards: [{name: exact_match}]\nmodel: {tiny: {arch: qwen2}}\n"
                   + (f"{section}:\n  total_steps: 2\n" if where == "file" else ""))
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "1+1?", "response": "2", "ground_truth": "2"}\n')
    override = [f"{section}.total_steps=2"] if where == "override" else []
    if command == "score":
        argv = [str(cfg), str(data), *override, "-o", str(tmp_path / "out.jsonl")]
    elif command == "migrate":
        argv = [str(cfg), *override]
    else:
        argv = [str(cfg), *override, "--output", str(tmp_path / "out"), "--no-progress"]
    assert main([command, *argv]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert (
        f"ERROR: unknown key {section}\n  did you mean {meant}? allowed: data, model, resources, reward, "
        "rollout, "
        "trainer" in err
    ), err
    assert not (tmp_path / "out.jsonl").exists() and not (tmp_path / "out").exists()


def test_every_legacy_example_still_loads(recwarn):
    """The check of top-level sections runs after the migration: every verl key is accepted (migrated or
    dropped with its reason), in each shared legacy example and the repo's own."""
    from pathlib import Path

    data = Path(__file__).resolve().parent / "data"
    found = sorted(p for p in (data / "legacy-examples").glob("*") if p.suffix in (".yaml", ".overrides"))
    found += sorted((data / "legacy").glob("*.yaml"))
    assert len(found) >= 10
    for path in found:
        plan = loader.load_plan(str(path))
        assert set(plan.config) <= set(loader.owned_sections()), path


def test_a_key_holding_a_yaml_anchor_is_no_misspelt_section(tmp_path):
    """``base: &b {...}`` reused as ``<<: *b`` holds shared values: left as it is; a misspelt section is
    not."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text("base: &b {weight: 2.0}\nreward:\n  rewards:\n    - {name: exact_match, <<: *b}\n")
    plan = loader.load_plan(str(cfg))
    assert plan.config.reward.rewards[0].weight == 2.0 and set(plan.config) == {"base", "reward"}
    cfg.write_text("base: &b {weight: 2.0}\nrewad:\n  rewards:\n    - {name: exact_match, <<: *b}\n")
    with pytest.raises(UsageError, match=r"^unknown key rewad\ndid you mean reward\? allowed: "):
        loader.load_plan(str(cfg))
    assert loader.anchor_holders("a: &x 1\nb: *x\nc: &y [1]\nd: {e: &z 2}\n? [k]\n: &w 3\n") == {"a", "c"}
