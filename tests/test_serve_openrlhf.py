"""OpenRLHF's replies through ``rewardhub serve``'s ``/get_reward``, as OpenRLHF 0.11.2 sends them: its own
``SingleTurnAgentExecutor.execute`` (its file loaded unchanged) tokenizes a ChatML prompt, takes the
model's reply tokens, decodes prompt + reply with ``skip_special_tokens=False`` and posts the query.
The model is the one stand-in (no GPU, no weights): it answers fixed token ids, ``Paris`` + its end
token. The tokenizer is real: a byte-level BPE built here, with ChatML's special tokens and template."""

from __future__ import annotations

import asyncio
import types
from pathlib import Path
from typing import Any

import pytest
from serve_process import Server
from test_serve import _openrlhf_agent

pytest.importorskip("aiohttp")

REPO = Path(__file__).resolve().parent.parent

CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
EXACT = "reward:\n  rewards:\n    - name: exact_match\n"
QUESTION = [{"role": "user", "content": "What is the capital of France? Answer with one word."}]


def _tokenizer(folder: Path, eos: str = "<|im_end|>") -> Any:
    """A real fast tokenizer (byte-level BPE trained on a few lines) with ChatML's special tokens."""
    from tokenizers import Tokenizer
    from tokenizers import decoders
    from tokenizers import models
    from tokenizers import pre_tokenizers
    from tokenizers import trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", eos]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    corpus = ["What is the capital of France? Answer with one word.", "Paris", "user assistant system"]
    bpe.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=400, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token=eos, pad_token="<|endoftext|>",
                                  additional_special_tokens=["<|im_start|>"], chat_template=CHATML)
    tok.save_pretrained(str(folder))
    return tok


class _Model:
    """Stands in for OpenRLHF's vLLM engine: every generate answers ``reply_ids``."""

    def __init__(self, reply_ids: list[int]) -> None:
        self.reply_ids = reply_ids

    async def generate(self, prompt_token_ids: list[int], params: Any, multi_modal_data: Any = None) -> Any:
        out = types.SimpleNamespace(token_ids=list(self.reply_ids), finish_reason="stop", logprobs=None)
        return types.SimpleNamespace(outputs=[out])


def _openrlhf_reward(url: str, tok: Any, reply: str, label: str, max_length: int = 512) -> Any:
    agent = _openrlhf_agent()
    executor = agent.SingleTurnAgentExecutor(url + "/get_reward")
    prompt = tok.apply_chat_template(QUESTION, tokenize=False, add_generation_prompt=True)
    model = _Model(tok.encode(reply, add_special_tokens=False) + [tok.eos_token_id])
    params = types.SimpleNamespace(max_tokens=8, logprobs=None)
    out = asyncio.run(executor.execute(prompt, label, params, max_length, tok, model))
    return out["reward"]  # a list: one value per query of the request (here one)


def test_openrlhf_reply_is_scored_without_its_end_token(tmp_path):
    """``Paris<|im_end|>`` (what OpenRLHF's decode sends) scores 1.0 on exact_match; it was 0.0."""
    tok = _tokenizer(tmp_path / "tok")
    cfg = tmp_path / "exact.yaml"
    cfg.write_text(EXACT)
    with Server(cfg) as server:  # no --tokenizer: the default end texts of common chat templates
        assert _openrlhf_reward(server.url, tok, "Paris", "Paris") == [1.0]
        assert _openrlhf_reward(server.url, tok, "Lyon", "Paris") == [0.0]
        # pads after the end token go too; text inside the reply is left alone
        status, ans = server.post("/get_reward", {
            "query": ["Q: Paris<|im_end|><|endoftext|><|endoftext|>", "Q: Paris</s>", "Q: <|im_end|>Paris"],
            "prompts": ["Q: "] * 3, "labels": ["Paris"] * 3})
        assert status == 200 and ans["rewards"] == [1.0, 1.0, 0.0]
        assert server.metric("rewardhub_prompt_not_prefix_total") == 0


def test_tokenizer_names_the_end_tokens(tmp_path):
    """A template whose end token is in no default list: ``--tokenizer`` strips that tokenizer's
    special tokens; ``--end-token`` names texts by hand (replacing the defaults)."""
    tok = _tokenizer(tmp_path / "tok", eos="<|my_turn_ends|>")
    cfg = tmp_path / "exact.yaml"
    cfg.write_text(EXACT)
    with Server(cfg, "--tokenizer", str(tmp_path / "tok"), env={"HF_HUB_OFFLINE": "1"}) as server:
        assert _openrlhf_reward(server.url, tok, "Paris", "Paris") == [1.0]
    with Server(cfg, "--end-token", "<|my_turn_ends|>") as server:
        assert _openrlhf_reward(server.url, tok, "Paris", "Paris") == [1.0]
        status, ans = server.post("/get_reward", {"query": ["Q: Paris<|im_end|>"], "prompts": ["Q: "],
                                                  "labels": ["Paris"]})
        assert status == 200 and ans["rewards"] == [0.0]  # no longer a default


def test_queries_that_do_not_start_with_their_prompt_are_counted(tmp_path):
    """OpenRLHF cuts a prompt longer than its budget from the left, so the query starts with the
    prompt's tail: scored whole (prompt included), counted in /metrics and said in the log."""
    tok = _tokenizer(tmp_path / "tok")
    cfg = tmp_path / "exact.yaml"
    cfg.write_text(EXACT)
    with Server(cfg) as server:
        assert _openrlhf_reward(server.url, tok, "Paris", "Paris", max_length=12) == [0.0]  # truncated prompt
        assert server.metric("rewardhub_prompt_not_prefix_total") == 1
        assert _openrlhf_reward(server.url, tok, "Paris", "Paris") == [1.0]
        assert server.metric("rewardhub_prompt_not_prefix_total") == 1
    log = "".join(server.stderr)
    assert "WARNING: 1 of 1 queries of a /get_reward request do not start with their prompt" in log


def test_a_tokenizer_that_cannot_be_loaded_is_an_error_naming_it(tmp_path, cli):
    cfg = tmp_path / "exact.yaml"
    cfg.write_text(EXACT)
    missing = tmp_path / "no-such-tokenizer"
    res = cli("serve", str(cfg), "--port", "0", "--tokenizer", str(missing), env={"HF_HUB_OFFLINE": "1"},
              timeout=120)
    assert res.returncode == 2
    assert res.stderr.startswith(f"ERROR: --tokenizer {missing}: cannot load the tokenizer")
    assert "--end-token" in res.stderr and "Traceback" not in res.stderr
