"""Log-probabilities of sampled response tokens under a causal LM, with autograd, as the learner needs them.

:func:`response_logprobs` picks the way: :func:`shared_prompt_logprobs` when samples share prompts
(GRPO's groups) and the model's head is plain, else :func:`full_logprobs`. Both give the same values
and gradients (``tests/trainer/test_logprobs.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

__all__ = [
    "PLAIN_HEAD_MODELS",
    "full_logprobs",
    "left_padded_cache",
    "response_logprobs",
    "shared_prompt_logprobs",
    "token_logprobs",
]

#: model types whose causal-LM logits are exactly ``lm_head(decoder(...).last_hidden_state)`` (no
#: logit scaling or soft-capping), so that :func:`response_logprobs` may run the two parts itself
PLAIN_HEAD_MODELS = frozenset({"llama", "qwen2", "qwen3", "mistral"})


def token_logprobs(
    logits: torch.Tensor,
    targets: torch.Tensor,
    temperature: float,
    want_entropy: bool = False,
    entropy_grad: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``log_softmax(logits / T)`` at ``targets`` (``[tokens, vocab]`` logits, ``[tokens]`` targets), and the
    entropy of each row when ``want_entropy`` (with autograd only when ``entropy_grad``).

    The log-prob is ``z[target] - logsumexp(z)``: no full-vocabulary log-softmax is kept for backward.
    The entropy is ``logsumexp(z) - sum(softmax(z) * z)``.
    """
    z = logits.float() / temperature
    lse = torch.logsumexp(z, dim=-1)
    token_lp = z.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - lse
    if not want_entropy:
        return token_lp, None
    with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
        zz, ll = (z, lse) if entropy_grad else (z.detach(), lse.detach())
        ent = ll - (torch.softmax(zz, dim=-1) * zz).sum(-1)
    return token_lp, ent


def response_logprobs(model: Any, samples: Sequence[Any], temperature: float,
                      pad_id: int = 0, autocast: str = "none", entropy: list[torch.Tensor] | None = None,
                      entropy_grad: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs of each sample's response tokens, ``[batch, max_response_len]`` plus its mask.

    With ``entropy`` (a list), the policy's entropy at each response position is appended to it
    (``[batch, max_response_len]``, zero-padded); with ``entropy_grad=False`` it is computed without
    autograd (a metric only: no graph over the full-vocabulary probabilities is kept).

    GRPO's samples come in groups that share a prompt. When some do (and the model's head is plain,
    :data:`PLAIN_HEAD_MODELS`), each prompt goes through the model once and its key/value cache is
    shared by its responses (:func:`shared_prompt_logprobs`): the same values and gradients as
    :func:`full_logprobs`, with a fraction of the prompt's FLOPs.
    """
    if (len({tuple(s.prompt_ids) for s in samples}) < len(samples)
            and getattr(model.config, "model_type", None) in PLAIN_HEAD_MODELS):
        return shared_prompt_logprobs(model, samples, temperature, pad_id, autocast, entropy, entropy_grad)
    return full_logprobs(model, samples, temperature, pad_id, autocast, entropy, entropy_grad)


def full_logprobs(model: Any, samples: Sequence[Any], temperature: float,
                  pad_id: int = 0, autocast: str = "none", entropy: list[torch.Tensor] | None = None,
                  entropy_grad: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`response_logprobs` the straightforward way: each prompt + response through the model.

    Sequences are right-padded; only the positions that predict response tokens go through the
    LM head (``logits_to_keep``), which on a 49k vocabulary is a large part of the cost.
    """
    lengths = [len(s.prompt_ids) + len(s.response_ids) for s in samples]
    width = max(lengths)
    rlen = max(len(s.response_ids) for s in samples)
    first = min(len(s.prompt_ids) for s in samples) - 1  # first position whose logits are needed
    keep = width - first
    ids = torch.full((len(samples), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(samples), width), dtype=torch.long)
    for i, s in enumerate(samples):
        seq = s.prompt_ids + s.response_ids
        ids[i, : len(seq)] = torch.tensor(seq)
        attn[i, : len(seq)] = 1
    device = next(model.parameters()).device
    ids, attn = ids.to(device), attn.to(device)
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast == "bfloat16"):
        logits = model(input_ids=ids, attention_mask=attn, logits_to_keep=keep).logits
    logits = logits.float()
    mask = torch.zeros((len(samples), rlen), dtype=torch.float32, device=device)
    rows, ents = [], []
    for i, s in enumerate(samples):
        p, r = len(s.prompt_ids), len(s.response_ids)
        # the token at position t is predicted by the logits at t - 1; logits[j] is position first + j
        step_logits = logits[i, p - 1 - first : p - 1 - first + r]
        lp, ent = token_logprobs(
            step_logits, ids[i, p : p + r], temperature, entropy is not None, entropy_grad
        )
        rows.append(torch.nn.functional.pad(lp, (0, rlen - r)))
        if ent is not None:
            ents.append(torch.nn.functional.pad(ent, (0, rlen - r)))
        mask[i, :r] = 1.0
    if entropy is not None:
        entropy.append(torch.stack(ents))
    return torch.stack(rows), mask


def left_padded_cache(model: Any, ids: torch.Tensor, mask: torch.Tensor) -> Any:
    """A key/value cache of left-padded token rows (``mask`` 0 on the padding), from ``model``'s decoder.

    Each row's positions count its own tokens from 0; padding is masked, so its positions never matter.
    The generation engine (prompts for ``generate``) and :func:`shared_prompt_logprobs` both fill one.
    """
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    pos = (mask.long().cumsum(-1) - 1).clamp(min=0)
    model.get_decoder()(
        input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=cache, use_cache=True
    )
    return cache


def shared_prompt_logprobs(model: Any, samples: Sequence[Any], temperature: float,
                           pad_id: int = 0, autocast: str = "none", entropy: list[torch.Tensor] | None = None,
                           entropy_grad: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`response_logprobs` with each distinct prompt through the model once.

    The distinct prompts' tokens but the last, left-padded to the longest, fill one key/value cache
    in one pass (with autograd); each prompt's row is repeated for its responses, and every sample's
    ``[last prompt token] + response`` (right-padded) runs on it in a second pass. Two passes over the
    whole micro-batch, not two per prompt: larger matmuls (bench_learner.py: 8 % less time for
    bench_trl's micro-batches of two prompts). The LM head sees only the hidden states that predict
    response tokens (no prompt, no padding). Gradients reach the prompts' computation through the
    repeated cache, summed over each prompt's responses.
    """
    from transformers import DynamicCache

    device = next(model.parameters()).device
    decoder, head = model.get_decoder(), model.get_output_embeddings()
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, s in enumerate(samples):
        groups.setdefault(tuple(s.prompt_ids), []).append(i)
    prompts = list(groups)
    order = [i for idx in groups.values() for i in idx]
    lens = [len(samples[i].response_ids) for i in order]
    rlen, width = max(lens), 1 + max(lens)
    # every prompt's tokens but the last, left-padded to the longest, fill one key/value cache; each
    # prompt's row is then repeated for its responses
    past = max(len(p) for p in prompts) - 1
    cache = DynamicCache(config=model.config)
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast == "bfloat16"):
        if past:
            pids = torch.full((len(prompts), past), pad_id, dtype=torch.long)
            pmask = torch.zeros((len(prompts), past), dtype=torch.long)
            for g, p in enumerate(prompts):
                if len(p) > 1:
                    pids[g, past - len(p) + 1:] = torch.tensor(p[:-1], dtype=torch.long)
                    pmask[g, past - len(p) + 1:] = 1
            cache = left_padded_cache(model, pids.to(device), pmask.to(device))
            reps = torch.tensor([len(idx) for idx in groups.values()])
            cache.batch_select_indices(torch.repeat_interleave(torch.arange(len(prompts)), reps).to(device))
        # then [last prompt token] + response for every sample, at once, on that cache
        ids = torch.full((len(order), width), pad_id, dtype=torch.long)
        attn = torch.zeros((len(order), past + width), dtype=torch.long)
        pos = torch.zeros((len(order), width), dtype=torch.long)
        row = 0
        for p, idx in groups.items():
            for i in idx:
                r = len(samples[i].response_ids)
                ids[row, 0] = p[-1]
                ids[row, 1 : 1 + r] = torch.tensor(samples[i].response_ids, dtype=torch.long)
                attn[row, past - len(p) + 1 : past + 1 + r] = 1
                pos[row] = torch.arange(len(p) - 1, len(p) - 1 + width)
                row += 1
        out = decoder(input_ids=ids.to(device), attention_mask=attn.to(device), position_ids=pos.to(device),
                      past_key_values=cache, use_cache=True).last_hidden_state
        # the hidden state at j predicts response token j (position 0 is the last prompt token)
        logits = head(torch.cat([out[k, : lens[k]] for k in range(len(order))]))
    targets = torch.tensor(
        [t for i in order for t in samples[i].response_ids], dtype=torch.long, device=device
    )
    token_lp, token_ent = token_logprobs(logits, targets, temperature, entropy is not None, entropy_grad)
    del logits
    lp_rows: list[torch.Tensor] = [token_lp] * len(samples)
    ent_rows: list[torch.Tensor] = [token_lp] * len(samples)
    mask = torch.zeros((len(samples), rlen), dtype=torch.float32, device=device)
    start = 0
    for i in order:
        r = len(samples[i].response_ids)
        lp_rows[i] = torch.nn.functional.pad(token_lp[start : start + r], (0, rlen - r))
        if token_ent is not None:
            ent_rows[i] = torch.nn.functional.pad(token_ent[start : start + r], (0, rlen - r))
        mask[i, :r] = 1.0
        start += r
    if entropy is not None:
        entropy.append(torch.stack(ent_rows))
    return torch.stack(lp_rows), mask
