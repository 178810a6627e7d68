"""``on_failure: drop`` on one of several terms (issue 42 §2): a sample whose dropped term failed is
invalid in training (NaN: left out of its group and of the update), not scored on its other terms as if
it were a wrong answer. Scored by the real runner; the training reward is what the reward client hands
the learner."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from rewardhub.execution import Runner  # noqa: E402
from rewardhub_trainer.learner import group_advantages  # noqa: E402
from rewardhub_trainer.reward_client import training_scores  # noqa: E402

REWARDS = '''
def verify(*, response, **kwargs):
    if response == "crash":
        raise RuntimeError("verifier crashed")
    return 1.0 if response.startswith("right") else 0.0

def formatted(*, response, **kwargs):
    return 1.0
'''


def _score(tmp_path, on_failure):
    path = tmp_path / "my_rewards.py"
    path.write_text(REWARDS)
    terms = [{"path": str(path), "function": "verify", "on_failure": on_failure},
             {"path": str(path), "function": "formatted", "weight": 0.5}]
    samples = [{"prompt": "p", "response": r, "ground_truth": None, "data_source": "d", "extra_info": {}}
               for r in ("right", "wrong", "crash", "right again")]
    with Runner.from_config({"rewards": terms}) as runner:
        return runner.score(samples)


@pytest.mark.timeout(120)
def test_a_dropped_failure_is_an_invalid_sample_not_a_wrong_answer(tmp_path):
    res = _score(tmp_path, "drop")
    assert res.scores[2] == 0.5  # the scored row: the format term alone (what `score` writes)
    got = training_scores(res)
    assert got[:2] == [1.5, 0.5] and got[3] == 1.5
    assert math.isnan(got[2])  # before: 0.5, a wrong answer's reward
    adv = group_advantages(torch.tensor([got], dtype=torch.float64))
    want = group_advantages(torch.tensor([[1.5, 0.5, 1.5]], dtype=torch.float64))
    assert adv[0, 2] == 0 and adv[0, [0, 1, 3]].tolist() == want[0].tolist()


@pytest.mark.timeout(120)
def test_zero_still_trains_a_failure_as_the_zero_it_asks_for(tmp_path):
    assert training_scores(_score(tmp_path, "zero")) == [1.5, 0.5, 0.5, 1.5]
    assert math.isnan(training_scores(_score(tmp_path, "nan"))[2])
