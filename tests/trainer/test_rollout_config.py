"""Rollouters take the run's typed ``rollout:`` and ``data:`` sections (frozen dataclasses) as the
driver parsed them, not ``asdict(...)`` copies read by string keys; the evaluator's differ only in
``n`` and ``temperature`` (``val_n``, ``val_temperature``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

pytest.importorskip("torch")

from rewardhub_trainer.actors import Rollouter  # noqa: E402
from rewardhub_trainer.config import DataConfig  # noqa: E402
from rewardhub_trainer.config import ModelConfig  # noqa: E402
from rewardhub_trainer.config import RolloutConfig  # noqa: E402
from rewardhub_trainer.data import Prompt  # noqa: E402
from rewardhub_trainer.models import materialize  # noqa: E402
from rewardhub_trainer.rollouts import PromptBatch  # noqa: E402

pytestmark = pytest.mark.timeout(180)
ROOT = Path(__file__).resolve().parents[2]


def test_a_rollouter_samples_with_its_typed_rollout_section(model_cache):
    path = materialize(ModelConfig(tiny={"arch": "qwen2"}))
    rollout = RolloutConfig(n=3, max_new_tokens=5, temperature=0.9, top_k=4)
    data = DataConfig(template="plain", instruction=" Think.")
    r = Rollouter(path, rollout, data, device="cpu", dtype="float32", seed=1)
    assert r.rollout is rollout and r.instruction == " Think." and r.template == "plain"
    out = r.generate(PromptBatch(0, [Prompt("1 + 1", "2", "builtin")], [0]))
    assert not isinstance(out, int)
    [group] = out.groups
    assert len(group) == 3 and all(len(c.response_ids) <= 5 for c in group)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.rollout.n = 8  # type: ignore[misc]


def test_no_rollout_or_data_section_is_turned_into_a_dict_for_an_actor():
    src = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "trainer/rewardhub_trainer").glob("*.py"))
    assert "asdict(cfg.rollout)" not in src and "asdict(cfg.data)" not in src
