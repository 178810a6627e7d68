"""``to_trl`` inside a real ``GRPOTrainer.train()``: two optimizer steps on a tiny random model,
offline, with rewardhub rewards as TRL's ``reward_funcs``."""

from __future__ import annotations

import os

import pytest

from rewardhub.adapters import to_trl

pytest.importorskip("trl")
pytest.importorskip("rewardhub_trainer")


@pytest.mark.timeout(300)
# TRL 1.16 still sets the name transformers 5.25 deprecates (third-party, not ours)
@pytest.mark.filterwarnings("ignore:`[a-z_]*gradient_checkpointing[a-z_]*` is deprecated:FutureWarning")
def test_grpo_trainer_trains_two_steps_with_to_trl(tmp_path, monkeypatch):
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM
    from trl import GRPOConfig
    from trl import GRPOTrainer

    from rewardhub_trainer.config import ModelConfig
    from rewardhub_trainer.models import load_tokenizer
    from rewardhub_trainer.models import materialize

    monkeypatch.setenv("REWARDHUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    torch.manual_seed(0)
    path = materialize(ModelConfig(tiny={"arch": "llama", "seed": 3}))
    calls: list[int] = []
    length = to_trl(
        "overlong_penalty", kwargs={"max_length": 4, "buffer": 2}, executor="thread", timeout_s=30
    )
    match = to_trl("exact_match")

    def counted(prompts, completions, **kwargs):  # how often TRL called the exported reward, and with what
        calls.append(len(completions))
        assert "answer" in kwargs and len(kwargs["answer"]) == len(completions)
        return match(prompts=prompts, completions=completions, **kwargs)

    counted.__name__ = "exact_match"
    rows = [{"prompt": f"{a} + {a} =", "answer": str(2 * a)} for a in range(8)]
    cfg = GRPOConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=4, num_generations=2,
                     max_completion_length=6, max_steps=2, learning_rate=1e-4, temperature=1.0, beta=0.0,
                     use_cpu=True, bf16=False, fp16=False, report_to=[], logging_steps=1, save_strategy="no",
                     use_vllm=False, dataloader_num_workers=0, seed=0)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    before = [p.detach().clone() for p in model.parameters()]
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[counted, length],
        args=cfg,
        train_dataset=Dataset.from_list(rows),
        processing_class=load_tokenizer(path),
    )
    trainer.train()
    assert trainer.state.global_step == 2
    assert sum(calls) >= 8 and all(n > 0 for n in calls)  # every generated completion was scored
    logged = [h for h in trainer.state.log_history if "rewards/exact_match/mean" in h]
    assert len(logged) == 2
    for h in logged:
        assert 0.0 <= h["rewards/exact_match/mean"] <= 1.0
        assert -1.0 <= h["rewards/overlong_penalty/mean"] <= 0.0  # a penalty: never positive
    changed = any(not torch.equal(a, b.detach()) for a, b in zip(before, model.parameters()))
    assert changed or all(h.get("loss", 0.0) == 0.0 for h in trainer.state.log_history if "loss" in h)
    assert os.path.isdir(path)
