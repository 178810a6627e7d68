"""Cores lent between a node's actors while one waits (rewardhub_trainer.cores): the board's arithmetic,
the threads torch really runs with inside a forward and a backward pass, and what is left after."""

from __future__ import annotations

import os
import uuid

import pytest

from rewardhub_trainer.config import ModelConfig
from rewardhub_trainer.cores import BUSY
from rewardhub_trainer.cores import IDLE
from rewardhub_trainer.cores import CoreShare
from rewardhub_trainer.cores import board_path
from rewardhub_trainer.cores import busy
from rewardhub_trainer.cores import off_because
from rewardhub_trainer.cores import remove_board
from rewardhub_trainer.cores import share_for
from rewardhub_trainer.cores import threads_for


@pytest.fixture
def token():
    name = f"test-{uuid.uuid4().hex[:8]}"
    yield name
    remove_board(name)


@pytest.fixture(autouse=True)
def _keep_threads():
    import torch

    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_idle_slots_lend_their_threads_to_the_busy_ones():
    b, i = BUSY, IDLE
    assert threads_for(bytes([b, i]), 0, 1) == 2  # learner busy, rollouter waiting
    assert threads_for(bytes([b, b]), 0, 1) == 1  # both at work: each its own
    assert threads_for(bytes([i, b]), 0, 1) == 1  # a waiting actor keeps its own (it computes nothing)
    assert threads_for(bytes([b, i, i]), 0, 4) == 12
    # two busy share two idle ones' 3 threads each: 6 split evenly; 2 idle x 1 thread over 3 busy:
    # the remainder goes to the lowest busy slots
    assert [threads_for(bytes([b, b, i, i]), s, 3) for s in (0, 1)] == [6, 6]
    assert [threads_for(bytes([b, i, b, b, i]), s, 1) for s in (0, 2, 3)] == [2, 2, 1]
    # a slot nobody wrote (another node, an actor still loading) lends nothing
    assert threads_for(bytes([b, 0]), 0, 2) == 2


def test_busy_takes_the_waiting_actors_threads_and_reports_them(token):
    import torch

    torch.set_num_threads(1)  # the actors' own threads (set where they start)
    learner = CoreShare(token, 0, 2, base=1)
    rollouter = CoreShare(token, 1, 2, base=1)
    assert os.path.exists(board_path(token))
    with learner.busy() as used:
        assert torch.get_num_threads() == 2
    assert used["threads"] == pytest.approx(2.0)
    assert torch.get_num_threads() == 1  # back to its own between calls
    # (both shares live in this one process here: each one's decision is its .threads)
    with rollouter.busy():
        assert rollouter.threads == 2  # the learner waits
        with learner.busy() as used:
            rollouter.check()  # the rollouter's next layer: the learner is back at work
            assert learner.threads == rollouter.threads == 1
        assert used["threads"] == pytest.approx(1.0)
    learner.close()
    rollouter.close()
    remove_board(token)
    assert not os.path.exists(board_path(token))


def test_a_share_needs_a_cpu_actor_with_threads_and_a_model(token):
    assert share_for(None, 1, "cpu", object()) is None
    assert share_for((token, 0, 2, "auto"), 0, "cpu", object()) is None  # threads not set: nothing to lend
    assert share_for((token, 0, 2, "auto"), 1, "cuda", object()) is None
    assert share_for((token, 0, 2, "auto"), 1, "cpu", None) is None
    # not a torch model: nothing to hook
    assert share_for((token, 0, 2, "always"), 1, "cpu", object()) is None
    with busy(None) as used:  # no share: the block changes nothing and reports nothing
        pass
    assert used == {}
    with pytest.raises(ValueError, match="slot 2 of 2"):
        CoreShare(token, 2, 2, base=1)


def test_lending_is_off_wherever_it_cannot_help():
    """Only CPU actors of one node, in fully_async, at automatic threads, with one learner and the
    transformers engine share a board; GPU actors, several nodes and vLLM keep their threads."""
    on = dict(mode="fully_async", lend="auto", torch_threads=0, num_learners=1, engine="transformers",
              gpus_asked=0.0, nodes=1)
    assert off_because(**on) is None
    for change, why in [({"mode": "sync"}, "sync mode"), ({"lend": "never"}, "lend_idle_cores=never"),
                        ({"torch_threads": 2}, "torch_threads"), ({"num_learners": 2}, "several learner"),
                        ({"engine": "vllm"}, "vllm engine"), ({"gpus_asked": 0.5}, "GPU actors"),
                        ({"nodes": 2}, "2 nodes")]:
        reason = off_because(**{**on, **change})
        assert reason is not None and why in reason, (change, reason)


def test_lending_is_off_by_default():
    """``trainer.lend_idle_cores`` defaults to ``never``: a fully_async run on CPU lends only when asked."""
    from rewardhub_trainer.config import parse_config

    cfg = {"trainer": {"mode": "fully_async"}, "model": {"tiny": {"arch": "qwen2"}},
           "reward": {"rewards": [{"name": "exact_match"}]}}
    on = dict(mode="fully_async", torch_threads=0, num_learners=1, engine="transformers", gpus_asked=0.0,
              nodes=1)
    default = parse_config(cfg).trainer.lend_idle_cores
    assert off_because(lend=default, **on) == "trainer.lend_idle_cores=never"
    asked = parse_config({**cfg, "trainer": {"mode": "fully_async", "lend_idle_cores": "auto"}})
    assert off_because(lend=asked.trainer.lend_idle_cores, **on) is None


@pytest.fixture(scope="module")
def tiny_model(model_cache):
    from transformers import AutoModelForCausalLM

    from rewardhub_trainer.models import materialize

    model = AutoModelForCausalLM.from_pretrained(materialize(ModelConfig(tiny={"arch": "qwen2", "seed": 5})))
    model.train()
    return model


def test_auto_borrows_only_for_layers_large_enough_to_gain(token, tiny_model):
    """The tiny model (64 x 128) lends and keeps its own thread; SmolLM2-135M's shape (576 x 1536) borrows."""
    import torch
    from transformers import Qwen2Config
    from transformers import Qwen2ForCausalLM

    from rewardhub_trainer.cores import worth_borrowing

    torch.set_num_threads(1)  # the actor's own threads (set where it starts)
    small = share_for((token, 0, 2, "auto"), 1, "cpu", tiny_model)
    assert small is not None and not small.borrow
    peer = CoreShare(token, 1, 2, base=1)
    with small.busy() as used:
        assert torch.get_num_threads() == 1
    assert used["threads"] == 1.0
    with peer.busy():  # the peer borrows the small one's waiting thread
        assert torch.get_num_threads() == 2
    forced = share_for((token, 0, 2, "always"), 1, "cpu", tiny_model)
    assert forced is not None and forced.borrow
    smol = Qwen2Config(hidden_size=576, intermediate_size=1536)
    assert worth_borrowing(type("M", (), {"config": smol})()) and not worth_borrowing(tiny_model)
    assert not worth_borrowing(Qwen2ForCausalLM(Qwen2Config(hidden_size=64, intermediate_size=128,
                                                            num_hidden_layers=1, num_attention_heads=2,
                                                            num_key_value_heads=1, vocab_size=300)))


def test_hooks_change_the_threads_within_a_forward_and_a_backward_pass(token, tiny_model):
    """The peer starts work between the forward and the backward pass: the backward pass (through
    every layer) runs on the learner's own thread only; the forward ran on both."""
    import torch

    model = tiny_model
    learner = CoreShare(token, 0, 2, base=1)
    assert learner.attach(model) == model.config.num_hidden_layers
    rollouter = CoreShare(token, 1, 2, base=1)
    layers = [m for m in model.modules() if type(m).__name__.endswith("DecoderLayer")]
    seen: dict[str, list[int]] = {"forward": [], "backward": []}

    def record(_m, _i, output):  # after the share's own hooks: what the layer's own work ran with
        seen["forward"].append(torch.get_num_threads())
        hidden = output[0] if isinstance(output, tuple) else output
        hidden.register_hook(lambda g: seen["backward"].append(torch.get_num_threads()))

    handles = [layer.register_forward_hook(record) for layer in layers]
    try:
        with learner.busy() as used:
            out = model(input_ids=torch.tensor([[5, 6, 7, 8]])).logits.sum()
            with rollouter.busy():
                out.backward()
    finally:
        for h in handles:
            h.remove()
        model.zero_grad(set_to_none=True)
    n = len(layers)
    assert seen["forward"] == [2] * n
    # the hook on a layer's output fires as its gradient arrives, before that layer's backward runs;
    # the last layer's output gradient is the first: the share's own hook (registered first) ran before it
    assert seen["backward"] == [1] * n
    assert 1.0 < used["threads"] < 2.0
