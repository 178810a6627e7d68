"""One typed plan: the loader validates ``reward:`` once into frozen dataclasses that every layer takes
as they are -- the runner, the Ray executor (which ships its terms to the workers as they are), the
worker setup and the trainer -- with no ``validated=`` flag standing in for the type."""

from __future__ import annotations

import ast
import dataclasses
import pickle
from pathlib import Path

import pytest

from rewardhub.config import RewardConfig
from rewardhub.config import TermConfig
from rewardhub.config import load_plan

ROOT = Path(__file__).resolve().parents[1]
TERMS = (
    "reward.rewards=[{name: exact_match, weight: 2.0, kwargs: {strip: true}}, {name: math_verify, tags: [m]}]"
)


@pytest.fixture
def plan():
    return load_plan(None, [TERMS, "reward.workers.num_workers=1"])


def test_a_plans_reward_section_is_frozen_and_typed(plan):
    reward = plan.reward
    assert isinstance(reward, RewardConfig) and all(isinstance(t, TermConfig) for t in reward.rewards)
    assert (
        reward.rewards[0].weight == 2.0
        and reward.rewards[1].tags == ("m",)
        and reward.workers.num_workers == 1
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        reward.rewards[0].weight = 3.0  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        reward.workers.num_workers = 4  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        reward.rewards = ()  # type: ignore[misc]


def test_a_plans_reward_section_round_trips_through_pickle(plan):
    again = pickle.loads(pickle.dumps(plan.reward))
    assert again == plan.reward and type(again.rewards[0]) is TermConfig


def test_the_typed_section_is_taken_as_it_is(plan):
    from rewardhub.config.schema import validate_reward
    from rewardhub.distributed import prepare_setup

    assert validate_reward(plan.reward) is plan.reward
    setup, _ = prepare_setup(plan.reward, ship_files=False)
    assert isinstance(setup.reward_cfg, RewardConfig)
    assert setup.reward_cfg.rewards == plan.reward.rewards  # the same terms, the plugin environment folded in


def test_the_ray_executor_ships_the_typed_terms_and_a_worker_resolves_them_again(plan):
    from rewardhub.distributed import runner_from_config
    from rewardhub.distributed._executor import RayExecutor
    from rewardhub.execution import Runner

    ray_terms = dataclasses.replace(plan.reward, rewards=tuple(dataclasses.replace(t, executor="ray")
                                                               for t in plan.reward.rewards))
    with runner_from_config(ray_terms) as runner:
        shipped = RayExecutor(runner.terms).reward_cfg  # no Ray starts before the first score
    assert isinstance(shipped, RewardConfig)
    assert [(t.alias, t.executor, t.weight) for t in shipped.rewards] == [("exact_match", "inline", 2.0),
                                                                           ("math_verify", "inline", 1.0)]
    with Runner.from_config(pickle.loads(pickle.dumps(shipped))) as again:
        assert [t.name for t in again.terms] == ["exact_match", "math_verify"]
        assert [t.kwargs for t in again.terms] == [t.kwargs for t in runner.terms]


def test_the_typed_section_crosses_a_ray_actor_as_it_is(plan, session_ray):
    ray = session_ray

    @ray.remote(num_cpus=0)
    class Echo:  # a local class: Ray pickles it by value (the workers cannot import this test module)
        def back(self, reward):
            return type(reward.rewards[0]).__module__, reward

    actor = Echo.remote()
    try:
        kind, back = ray.get(actor.back.remote(plan.reward), timeout=120)
    finally:
        ray.kill(actor)
    assert kind == "rewardhub.config.schema" and back == plan.reward


#: every container field of the frozen reward sections: (section path, field, a plain value for it)
CONTAINERS = [("rewards[0]", "kwargs", {"strip": True, "stop": ["a", {"b": 1}]}),
              ("rewards[0]", "data_sources", ["d"]), ("rewards[0]", "tags", ["m"]),
              ("plugins", "load", ["math_verify"]), ("plugins", "block", ["x"]),
              ("plugins", "prefer", {"exact_match": "builtin"}), ("workers", "resources", {"r": 1.0}),
              ("reward_model", "rollout", {"gpu_memory_utilization": 0.5, "engine_kwargs": {"a": [1]}})]


def _deep_section():
    from rewardhub.config.schema import validate_reward

    raw: dict = {"rewards": [{"name": "exact_match"}]}
    for where, key, value in CONTAINERS:
        node = raw["rewards"][0] if where == "rewards[0]" else raw.setdefault(where, {})
        node[key] = value
    return raw, validate_reward(raw)


def test_the_frozen_sections_hash_and_none_of_their_containers_changes_in_place():
    raw, reward = _deep_section()
    assert hash(reward) == hash(pickle.loads(pickle.dumps(reward))) and hash(reward.rewards[0])
    for where, key, _ in CONTAINERS:
        section = reward.rewards[0] if where == "rewards[0]" else getattr(reward, where)
        value = getattr(section, key)
        hash(value)
        with pytest.raises((TypeError, AttributeError)):
            value["new"] = 1  # type: ignore[index]
        with pytest.raises((TypeError, AttributeError)):
            value.append("x")  # type: ignore[union-attr]
    kwargs = reward.rewards[0].kwargs
    with pytest.raises(TypeError, match="frozen"):
        kwargs["stop"][1]["b"] = 2  # frozen all the way down
    with pytest.raises(TypeError, match="frozen"):
        kwargs.update(strip=False)  # type: ignore[attr-defined]
    made_by_hand = dataclasses.replace(reward.rewards[0], kwargs={"k": [1]}, tags=["t"])
    assert made_by_hand.tags == ("t",) and hash(made_by_hand)


def test_a_frozen_section_is_written_out_and_given_to_a_reward_as_plain_data():
    import json

    from rewardhub.config.schema import as_dict
    from rewardhub.execution import resolve_terms

    raw, reward = _deep_section()
    out = as_dict(reward)
    assert out["rewards"][0]["kwargs"] == raw["rewards"][0]["kwargs"]
    assert type(out["rewards"][0]["kwargs"]["stop"]) is list and type(out["plugins"]["prefer"]) is dict
    # the JSON a run writes (run.json: compared on resume) is what plain dicts and lists give
    plain = json.loads(json.dumps(out))
    assert json.dumps(out, sort_keys=True) == json.dumps(plain, sort_keys=True)
    assert plain["plugins"]["load"] == ["math_verify"] and plain["workers"]["resources"] == {"r": 1.0}
    term = resolve_terms(dataclasses.replace(reward, plugins=type(reward.plugins)()))[0]
    assert type(term.kwargs) is dict and term.kwargs["stop"] == ["a", {"b": 1}]


def test_build_registry_reads_a_checked_section():
    from rewardhub.errors import UsageError
    from rewardhub.registry import build_registry

    with pytest.raises(UsageError, match=r"reward\.plugins\.blok"):  # a typo is named, not ignored
        build_registry({"plugins": {"blok": ["math_verify"]}}, autoload=False)
    with pytest.raises(UsageError, match="reward.plugins.load"):
        build_registry({"plugins": {"load": 3}}, autoload=False)


def _sources():
    for pkg in ("rewardhub", "trainer/rewardhub_trainer", *sorted(str(p.relative_to(ROOT))
                                                             for p in ROOT.glob("plugins/*/rewardhub_*"))):
        yield from sorted((ROOT / pkg).rglob("*.py"))


def test_no_validated_flag_term_config_or_to_node_remains():
    found = []
    for path in _sources():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.arg) and node.arg == "validated":
                found.append(f"{path}:{node.lineno} parameter validated")
            elif isinstance(node, ast.keyword) and node.arg == "validated":
                found.append(f"{path}:{node.lineno} keyword validated=")
            elif isinstance(node, ast.FunctionDef) and node.name in (
                "term_config",
                "_to_node",
                "normalize_reward_cfg",
            ):
                found.append(f"{path}:{node.lineno} def {node.name}")
    assert found == []


def test_a_plan_without_interpolations_leaves_omegaconf_unloaded_until_its_config_is_asked_for(tmp_path):
    """``score`` never reads ``plan.config``: a reward section with no ``${...}`` is validated as read,
    and OmegaConf (a tenth of ``score``'s start-up) is imported only when the ``DictConfig`` is asked for."""
    import subprocess
    import sys

    cfg = tmp_path / "c.yaml"
    cfg.write_text("reward:\n  rewards:\n    - name: exact_match\n      weight: 2.0\ndata:\n  n: 3\n")
    code = (
        "import sys\nfrom rewardhub.config import load_plan\n"
        f"plan = load_plan({str(cfg)!r}, ['data.m=${{data.n}}'])\n"
        "assert plan.reward.rewards[0].weight == 2.0\n"
        "assert 'omegaconf' not in sys.modules, 'imported by load_plan'\n"
        "from omegaconf import OmegaConf\n"
        "assert OmegaConf.is_readonly(plan.config) and plan.config.data.m == 3\n"
        "assert plan.config.reward.rewards[0].name == 'exact_match'\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                         timeout=120)
    assert out.returncode == 0, out.stderr


def test_a_reward_section_with_an_interpolation_is_resolved_against_the_whole_document():
    plan = load_plan(None, ["data.w=3.5", "reward.rewards=[{name: exact_match, weight: '${data.w}'}]"])
    assert plan.reward.rewards[0].weight == 3.5 and plan.config.data.w == 3.5
