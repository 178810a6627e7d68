"""Tiny models built offline: a random classifier, and a judge trained in seconds to answer `Score: 7`."""

from __future__ import annotations

import pytest

from rewardhub_models.tiny import save_byt5

#: a short rubric keeps the judge's prompts (bytes, for ByT5) short and its training quick
SHORT_RUBRIC = "Rate {low}-{high}. Reply: Score: N"


@pytest.fixture(scope="session")
def judge_rubric():
    return SHORT_RUBRIC


@pytest.fixture(scope="session")
def tiny_rm(tmp_path_factory):
    from rewardhub_models.tiny import build_tiny_reward_model

    return build_tiny_reward_model(tmp_path_factory.mktemp("tiny-rm"))


@pytest.fixture(scope="session")
def tiny_judge(tmp_path_factory):
    """A 1-layer Llama taught to answer every judging prompt with `Score: 7`."""
    import torch
    from transformers import ByT5Tokenizer
    from transformers import LlamaConfig
    from transformers import LlamaForCausalLM

    from rewardhub_models.judge import build_prompt

    path = tmp_path_factory.mktemp("tiny-judge")
    torch.manual_seed(0)
    tok = ByT5Tokenizer()
    config = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                         pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=None)
    model = LlamaForCausalLM(config)
    answer = tok("Score: 7", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    rows = []
    for i in range(24):
        text = build_prompt(
            SHORT_RUBRIC, f"What is {i} + {i % 5}?", f"It is {i * 3 % 17}.", str(i + i % 5), 0, 10
        )
        ids = tok(text + "\n", add_special_tokens=False)["input_ids"]
        rows.append((ids, answer))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    for step in range(300):
        batch = [rows[(step * 4 + j) % len(rows)] for j in range(4)]
        width = max(len(p) + len(a) for p, a in batch)
        ids = torch.full((4, width), tok.pad_token_id)
        labels = torch.full((4, width), -100)
        mask = torch.zeros((4, width), dtype=torch.long)
        for j, (p, a) in enumerate(batch):
            seq = p + a
            ids[j, :len(seq)] = torch.tensor(seq)
            labels[j, len(p):len(seq)] = torch.tensor(a)
            mask[j, :len(seq)] = 1
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        if loss.item() < 0.02:
            break
    model.eval()
    model.save_pretrained(path)
    save_byt5(tok, path)
    return str(path)
