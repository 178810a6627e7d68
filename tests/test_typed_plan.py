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
        and reward.rewards[1].tags == ["m"]
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
