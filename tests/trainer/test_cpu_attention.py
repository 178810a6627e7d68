"""On the CPU the rollout engine and the learner compute attention with the key/value heads as they are
(``models.CPU_ATTENTION``), not with transformers' "sdpa", which copies each key/value head once per
query head: the same logits, samples and gradients, with less copying."""

from __future__ import annotations

import pytest

from rewardhub_trainer.config import ModelConfig

torch = pytest.importorskip("torch")

# Both attentions run PyTorch's SDPA in fp32 over the same numbers; only the keys' and values' memory differs
# (a view vs a copy). Where a CPU's kernel sums them in another order, each of the tiny models' sums has at
# most 64 terms of magnitude <= ~10: 64 * 2**-23 * 10 < 1e-4 per sum, and two layers add a few such errors.
TOLERANCE = {"rtol": 1e-4, "atol": 1e-4}


@pytest.fixture(scope="module", params=["qwen2", "llama"])
def path(request, model_cache):
    from rewardhub_trainer.models import materialize

    # 4 query heads, 2 key/value heads
    return materialize(ModelConfig(tiny={"arch": request.param, "seed": 5}))


def _both(path):
    from transformers import AutoModelForCausalLM

    from rewardhub_trainer.models import CPU_ATTENTION
    from rewardhub_trainer.models import load_causal_lm

    ours = load_causal_lm(path, torch.float32, "cpu")
    plain = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    assert ours.config._attn_implementation == CPU_ATTENTION
    assert plain.config._attn_implementation == "sdpa"
    assert ours.config.num_key_value_heads < ours.config.num_attention_heads  # the case it changes
    return ours, plain


def _batch():
    """Left-padded rows of different lengths (a mask is given), as the engine and the learner build them."""
    rows = [[5 + i % 200 for i in range(n)] for n in (3, 17, 40, 9)]
    width = max(map(len, rows))
    ids = torch.tensor([[0] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    return ids, mask


@pytest.mark.timeout(120)
def test_logits_and_gradients_are_those_of_transformers_sdpa(path):
    ours, plain = _both(path)
    ids, mask = _batch()
    grads = []
    for model in (ours, plain):
        model.train()
        logits = model(input_ids=ids, attention_mask=mask).logits
        logp = torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None])[..., 0]
        (logp * mask[:, 1:]).sum().backward()
        grads.append({n: p.grad for n, p in model.named_parameters()})
        model.logits = logits.detach()  # type: ignore[attr-defined]
    real = mask.bool()
    torch.testing.assert_close(ours.logits[real], plain.logits[real], **TOLERANCE)
    for name, g in grads[0].items():
        torch.testing.assert_close(g, grads[1][name], **TOLERANCE, msg=lambda m, name=name: f"{name}: {m}")
    # one step with the cache, as generation runs: the next token's logits after the batch
    with torch.no_grad():
        nxt = torch.full((4, 1), 7)
        wider = torch.cat([mask, torch.ones(4, 1, dtype=mask.dtype)], 1)
        steps = []
        for model in (ours, plain):
            out = model(input_ids=ids, attention_mask=mask, use_cache=True)
            cache = out.past_key_values
            steps.append(model(input_ids=nxt, attention_mask=wider, past_key_values=cache).logits)
    torch.testing.assert_close(steps[0], steps[1], **TOLERANCE)


@pytest.mark.timeout(120)
def test_the_rollout_engine_samples_what_it_sampled_with_transformers_sdpa(path):
    from rewardhub_trainer.engine import TransformersEngine
    from rewardhub_trainer.models import CPU_ATTENTION

    engine = TransformersEngine(path)
    assert engine.model.config._attn_implementation == CPU_ATTENTION
    prompts = ["what is 2 + 3?", "name a colour", "a much longer prompt than the others, left padded " * 2]
    runs = []
    for attention in (CPU_ATTENTION, "sdpa"):
        engine.model.set_attn_implementation(attention)
        for temperature in (0.0, 1.0):
            runs.append(engine.generate(prompts, n=3, max_new_tokens=12, temperature=temperature, top_p=1.0,
                                        seed=11))
    for ours, plain in zip(runs[:2], runs[2:]):
        assert [[c.response_ids for c in g] for g in ours] == [[c.response_ids for c in g] for g in plain]
        for g1, g2 in zip(ours, plain):
            for a, b in zip(g1, g2):
                torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), **TOLERANCE)


@pytest.mark.timeout(60)
def test_a_model_off_the_cpu_keeps_transformers_attention(path):
    from rewardhub_trainer.models import load_causal_lm

    model = load_causal_lm(path, torch.float32, "meta")  # no CUDA here: "meta" is another device all the same
    assert model.config._attn_implementation == "sdpa"
