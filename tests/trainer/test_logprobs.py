"""The learner's shared-prompt log-probs equal the straightforward full-logits ones: values, entropy,
gradients."""

from __future__ import annotations

import pytest

from rewardhub_trainer.config import ModelConfig


@pytest.fixture(scope="module", params=["qwen2", "llama"])
def model(request, model_cache):
    from transformers import AutoModelForCausalLM

    from rewardhub_trainer.models import materialize

    path = materialize(ModelConfig(tiny={"arch": request.param, "seed": 3}))
    m = AutoModelForCausalLM.from_pretrained(path)
    m.train()
    return m


def _samples():
    from rewardhub_trainer.learner import TrainSample

    g1 = [100, 101, 102, 103, 104]
    g2 = [105, 106]
    return [TrainSample(g1, [110, 111, 112], [], 1.0), TrainSample(g1, [113], [], -1.0),
            TrainSample(g2, [114, 115, 116, 117, 118, 119], [], 0.5), TrainSample(g1, [120, 121], [], 0.0),
            TrainSample(g2, [122, 123], [], -0.5), TrainSample([107], [124, 125, 126], [], 0.2),
            TrainSample([107], [127], [], 0.1)]


def _one_token_prompts():
    """Only one-token prompts: no key/value cache to fill before the responses."""
    from rewardhub_trainer.learner import TrainSample

    return [TrainSample([107], [124, 125, 126], [], 0.2), TrainSample([107], [127], [], -0.1),
            TrainSample([108], [128, 129], [], 0.3)]


def _run(model, fn, samples, temperature):
    import torch

    from rewardhub_trainer.learner import clipped_policy_loss

    model.zero_grad(set_to_none=True)
    ent: list = []
    logp, mask = fn(model, samples, temperature, entropy=ent)
    adv = torch.tensor([s.advantage for s in samples])
    loss, _ = clipped_policy_loss(logp, logp.detach() - 0.1, adv, mask, 0.2)
    (loss + 0.3 * (ent[0] * mask).sum()).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logp.detach(), mask, ent[0].detach(), grads


@pytest.mark.parametrize(
    ("temperature", "make"),
    [(1.0, _samples), (0.7, _samples), (1.0, _one_token_prompts)],
    ids=["T1", "T0.7", "one-token-prompts"],
)
def test_shared_prompt_logprobs_equal_the_full_logits_path(model, temperature, make):
    import torch

    from rewardhub_trainer.learner import full_logprobs
    from rewardhub_trainer.learner import shared_prompt_logprobs

    samples = make()
    lp_full, mask_full, ent_full, g_full = _run(model, full_logprobs, samples, temperature)
    lp, mask, ent, g = _run(model, shared_prompt_logprobs, samples, temperature)
    assert torch.equal(mask, mask_full) and mask.sum() == sum(len(s.response_ids) for s in samples)
    assert torch.allclose(lp, lp_full, atol=1e-5) and (lp_full * (1 - mask) == 0).all()
    assert torch.allclose(ent, ent_full, atol=1e-5)
    assert g.keys() == g_full.keys() and len(g) > 5
    for name in g:
        assert torch.allclose(g[name], g_full[name], atol=1e-6, rtol=1e-4), name
    assert any(float(v.abs().max()) > 0 for v in g.values())


def test_response_logprobs_shares_prompts_only_where_they_repeat(model, monkeypatch):
    import rewardhub_trainer.logprobs as learner

    calls: list[str] = []
    for name in ("full_logprobs", "shared_prompt_logprobs"):
        real = getattr(learner, name)
        monkeypatch.setattr(learner, name, lambda *a, _r=real, _n=name, **k: calls.append(_n) or _r(*a, **k))
    samples = _samples()
    learner.response_logprobs(model, samples, 1.0)
    learner.response_logprobs(model, [samples[0], samples[2], samples[5]], 1.0)  # three distinct prompts
    assert calls == ["shared_prompt_logprobs", "full_logprobs"]


def test_generation_with_the_shared_prompt_cache_samples_as_without(model_cache, monkeypatch):
    """The engine's prompt cache (computed once per prompt, repeated n times) changes nothing sampled."""
    import torch

    from rewardhub_trainer.engine import TransformersEngine
    from rewardhub_trainer.models import materialize

    engine = TransformersEngine(materialize(ModelConfig(tiny={"arch": "llama", "seed": 3})))
    prompts = [engine.format_prompt("What is 12 + 30?", "plain"), engine.format_prompt("Hi", "plain")]
    enc = engine.tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    assert engine._prompt_cache(enc, 3).get_seq_length() == enc["input_ids"].shape[1] - 1

    def sample():
        return engine.generate(prompts, n=3, max_new_tokens=10, temperature=0.9, top_p=1.0, seed=11)

    shared = sample()
    monkeypatch.setattr(TransformersEngine, "_prompt_cache", lambda self, enc, n: None)
    plain = sample()
    for g1, g2 in zip(shared, plain):
        for a, b in zip(g1, g2):
            assert a.prompt_ids == b.prompt_ids and a.response_ids == b.response_ids
            assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5)


@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_token_logprobs_equal_log_softmax_and_the_metric_entropy_has_no_graph(temperature):
    import torch

    from rewardhub_trainer.logprobs import token_logprobs

    torch.manual_seed(0)
    logits = (3 * torch.randn(7, 50)).requires_grad_(True)
    targets = torch.randint(0, 50, (7,))
    full = torch.log_softmax(logits / temperature, dim=-1)
    want_lp = full.gather(-1, targets[:, None]).squeeze(-1)
    want_ent = -(full.exp() * full).sum(-1)
    lp, ent = token_logprobs(logits, targets, temperature, want_entropy=True)
    assert torch.allclose(lp, want_lp, atol=1e-5) and torch.allclose(ent, want_ent, atol=1e-5)
    assert ent.requires_grad and lp.requires_grad
    (g,) = torch.autograd.grad(ent.sum(), logits)
    (g_want,) = torch.autograd.grad(want_ent.sum(), logits)
    assert torch.allclose(g, g_want, atol=1e-5)
    lp2, metric = token_logprobs(logits, targets, temperature, want_entropy=True, entropy_grad=False)
    assert lp2.requires_grad and not metric.requires_grad and torch.allclose(metric, want_ent, atol=1e-5)
    assert token_logprobs(logits, targets, temperature)[1] is None
