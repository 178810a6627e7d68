"""reasoning-gym rewards: registered through the pluggy hook, scored with each dataset's score_answer."""

from __future__ import annotations

import reasoning_gym

from rewardhub.execution import Runner
from rewardhub.registry import build_registry
from rewardhub_reasoning_gym.plugin import dataset_names
from rewardhub_reasoning_gym.scoring import extract


def test_one_reward_per_dataset_through_the_hook():
    reg = build_registry()
    names = set(dataset_names())
    assert names == set(reasoning_gym.factory.DATASETS)
    for name in ("basic_arithmetic", "chain_sum", "word_sorting"):
        spec = reg.get_reward(f"reasoning_gym.{name}")
        assert spec.source == "plugin" and spec.plugin == "reasoning_gym"
        assert dict(spec.params) == {"dataset": name}
    plugin = {p["name"]: p for p in reg.plugins}["reasoning_gym"]
    assert plugin["hooks"] == ["rewardhub_register_rewards"]


def test_versions_read_in_one_pass_are_the_installed_ones(monkeypatch):
    """The plugin reads both versions from one listing of each sys.path folder (no importlib.metadata):
    what importlib.metadata says, the first folder on sys.path winning."""
    import importlib.metadata
    import sys

    from rewardhub_reasoning_gym import plugin

    dists = ("rewardhub-reasoning-gym", "reasoning-gym")
    assert plugin._versions(*dists) == {d: importlib.metadata.version(d) for d in dists}
    reg = build_registry()
    assert reg.get_reward("reasoning_gym").version == importlib.metadata.version("rewardhub-reasoning-gym")
    listed = []
    real = plugin.os.listdir
    monkeypatch.setattr(plugin.os, "listdir", lambda p: listed.append(p) or real(p))
    plugin.rewardhub_register_rewards()
    assert len(listed) <= len(sys.path)  # each sys.path folder listed once at most


def _samples(dataset, n, wrong=False):
    out = []
    for entry in reasoning_gym.create_dataset(dataset, size=n, seed=3):
        answer = "definitely wrong" if wrong else entry["answer"]
        out.append({"prompt": entry["question"], "response": f"<answer>{answer}</answer>",
                    "ground_truth": entry["answer"], "data_source": dataset,
                    "extra_info": {"metadata": entry["metadata"]}})
    return out


def test_routed_by_data_source_and_scored():
    batch = (
        _samples("basic_arithmetic", 5)
        + _samples("chain_sum", 5)
        + _samples("basic_arithmetic", 3, wrong=True)
    )
    cfg = {"rewards": [{"name": "reasoning_gym.basic_arithmetic"}, {"name": "reasoning_gym.chain_sum"},
                       {"name": "reasoning_gym", "alias": "any_dataset"}]}
    with Runner.from_config(cfg) as r:
        res = r.score(batch)
    assert [x["reasoning_gym.basic_arithmetic"] for x in res.rewards[:5]] == [1.0] * 5
    assert [x["reasoning_gym.chain_sum"] for x in res.rewards[:5]] == [None] * 5
    assert [x["reasoning_gym.chain_sum"] for x in res.rewards[5:10]] == [1.0] * 5
    assert [x["any_dataset"] for x in res.rewards] == [1.0] * 10 + [0.0] * 3
    assert [x["reasoning_gym.basic_arithmetic"] for x in res.rewards[10:]] == [0.0] * 3


def test_extract():
    assert extract("think... <answer> 4 </answer>") == "4"
    assert extract("so \\boxed{12}") == "12"
    assert extract(" 7 ") == "7"


def test_an_answer_the_dataset_cannot_read_is_wrong_not_a_failure():
    """prime_factorization's own score_answer raises ValueError on text that is not "p × q"
    (found by `rewardhub test`'s edge responses): scored 0.0, as any wrong answer."""
    from rewardhub_reasoning_gym.scoring import score

    entry = reasoning_gym.create_dataset("prime_factorization", size=1, seed=0)[0]
    sample = {
        "prompt": entry["question"],
        "ground_truth": entry["answer"],
        "data_source": "prime_factorization",
        "extra_info": {"entry": entry},
    }
    assert score(response=f"<answer>{entry['answer']}</answer>", **sample) == 1.0
    assert score(response="<answer>The answer is 42. Really.</answer>", **sample) == 0.0
