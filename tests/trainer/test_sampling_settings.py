"""The recorded log-probs are those of the distribution actually sampled (issue 15, item 4).

A model folder's generation_config.json may set sampling settings (repetition_penalty, min_p, ...)
that ``model.generate`` would apply silently; the transformers engine must sample with the
``rollout.*`` settings only. vLLM with ``top_p < 1`` records log-probs of the truncated distribution
while the learner's are over the whole vocabulary: the config refuses it, saying why.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from rewardhub.errors import UsageError  # noqa: E402
from rewardhub_trainer.config import ModelConfig  # noqa: E402
from rewardhub_trainer.config import parse_config  # noqa: E402
from rewardhub_trainer.engine import TransformersEngine  # noqa: E402
from rewardhub_trainer.learner import TrainSample  # noqa: E402
from rewardhub_trainer.learner import response_logprobs  # noqa: E402
from rewardhub_trainer.models import materialize  # noqa: E402

pytestmark = pytest.mark.timeout(180)

LEAKY = {"repetition_penalty": 3.0, "min_p": 0.3, "no_repeat_ngram_size": 2, "top_k": 3}


@pytest.fixture(scope="module")
def folders(tmp_path_factory, model_cache):
    """Two copies of the tiny model: one plain, one whose generation_config.json sets LEAKY."""
    base = Path(materialize(ModelConfig(tiny={"arch": "qwen2"})))
    root = tmp_path_factory.mktemp("gencfg")
    plain, leaky = root / "plain", root / "leaky"
    shutil.copytree(base, plain)
    shutil.copytree(base, leaky)
    path = leaky / "generation_config.json"
    cfg = json.loads(path.read_text())
    cfg.update(LEAKY)
    path.write_text(json.dumps(cfg))
    return plain, leaky


def _sample(folder: Path, seed: int = 7):
    engine = TransformersEngine(str(folder))
    prompts = ["Question: 1 + 1\nAnswer:", "Question: 2 + 3\nAnswer:"]
    return engine, engine.generate(prompts, n=4, max_new_tokens=12, temperature=0.9, top_p=1.0, seed=seed)


def test_generation_config_settings_do_not_change_what_is_sampled(folders):
    plain, leaky = folders
    engine_plain, out_plain = _sample(plain)
    engine_leaky, out_leaky = _sample(leaky)
    # the folder's settings are reported as ignored, and sampling is the same as without them
    assert engine_leaky.ignored_settings == {k: v for k, v in LEAKY.items() if k != "top_k"}
    assert engine_plain.ignored_settings == {}
    ids = [[c.response_ids for c in g] for g in out_plain]
    assert ids == [[c.response_ids for c in g] for g in out_leaky]
    # with a repetition penalty of 3 applied, a random byte model would repeat no byte in a response;
    # unpenalised it does (the check that this test can fail: the outputs above would differ)
    assert any(len(set(c.response_ids)) < len(c.response_ids) for g in out_leaky for c in g)
    for g_plain, g_leaky in zip(out_plain, out_leaky):
        for a, b in zip(g_plain, g_leaky):
            assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)


def test_recorded_logprobs_are_the_learners(folders):
    _, leaky = folders
    engine, out = _sample(leaky, seed=11)
    samples = [TrainSample(c.prompt_ids, c.response_ids, c.logprobs, 0.0) for g in out for c in g]
    model = engine.model
    with torch.no_grad():
        logp, mask = response_logprobs(model, samples, temperature=0.9)
    for i, s in enumerate(samples):
        n = len(s.response_ids)
        assert mask[i, :n].sum() == n
        assert logp[i, :n].tolist() == pytest.approx(s.old_logprobs, abs=2e-4)


def _cfg(**rollout):
    return {"model": {"tiny": {"arch": "qwen2"}}, "rollout": rollout,
            "reward": {"rewards": [{"name": "exact_match"}]}}


def test_vllm_with_top_p_below_one_is_refused_with_the_reason():
    with pytest.raises(UsageError) as err:
        parse_config(_cfg(engine="vllm", top_p=0.9))
    text = str(err.value)
    assert text.startswith("rollout.top_p=0.9 is not valid: with rollout.engine=vllm it is not supported")
    assert "truncated" in text and "rollout.top_p=1" in text
    # the transformers engine records full-distribution log-probs, like the learner: allowed
    assert parse_config(_cfg(engine="transformers", top_p=0.9)).rollout.top_p == 0.9


def test_plain_sampling_draws_each_token_with_its_probability():
    """Without top-p or top-k, the next token is drawn by inverting the CDF of softmax(logits / T):
    each token as often as its probability says (20,000 draws, within 4.5 standard deviations), never
    one of probability 0, and one finite score per row for generate to pick."""
    from rewardhub_trainer.engine import _InverseCdf
    from rewardhub_trainer.engine import _SampledLogprobs

    torch.manual_seed(0)
    rows, temperature = 20000, 0.7
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0, float("-inf"), 0.5, -6.0]]).repeat(rows, 1)
    recorder = _SampledLogprobs(temperature)
    ids = torch.zeros(rows, 1, dtype=torch.long)
    out = _InverseCdf(recorder)(ids, recorder(ids, logits))
    assert torch.isfinite(out).sum(-1).tolist() == [1] * rows and out.max().item() == 0.0
    drawn = out.argmax(-1)
    freq = torch.bincount(drawn, minlength=logits.shape[1]).double() / rows
    p = torch.softmax(logits[0].double() / temperature, -1)
    assert freq[4] == 0  # probability 0
    assert (freq - p).abs().max().item() < 4.5 * (0.25 / rows) ** 0.5, (freq, p)
    # the recorder takes the drawn tokens' log-probs at the next step, as for generate's own sampling
    recorder(drawn.unsqueeze(-1), logits)
    assert recorder.columns[0].tolist() == pytest.approx(torch.log(p[drawn]).float().tolist(), abs=1e-5)
    # logits that overflowed (weights blown up by the learner) raise as multinomial does
    for bad in (float("nan"), float("inf")):
        broken = logits[:2].clone()
        broken[1, 3] = bad
        recorder = _SampledLogprobs(temperature)
        with pytest.raises(RuntimeError, match="probability tensor contains either `inf`, `nan`"):
            _InverseCdf(recorder)(ids[:2], recorder(ids[:2], broken))


@pytest.mark.parametrize(("top_p", "top_k", "drawn_here"), [(1.0, 0, True), (0.9, 0, False), (1.0, 5, False)])
def test_only_plain_sampling_is_drawn_by_the_inverse_cdf(folders, monkeypatch, top_p, top_k, drawn_here):
    from rewardhub_trainer import engine as engine_module

    calls = []
    real = engine_module._InverseCdf.__call__

    def counted(self, input_ids, scores):
        calls.append(1)
        return real(self, input_ids, scores)

    monkeypatch.setattr(engine_module._InverseCdf, "__call__", counted)
    engine = TransformersEngine(str(folders[0]))
    out = engine.generate(["Question: 1 + 1\nAnswer:"], n=3, max_new_tokens=6, temperature=0.9, top_p=top_p,
                          top_k=top_k, seed=3)
    assert bool(calls) == drawn_here
    assert all(len(c.logprobs) == len(c.response_ids) > 0 for g in out for c in g)
