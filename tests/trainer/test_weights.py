"""Weights travel from the learner to the rollouters as numpy arrays, and arrive bit for bit."""

from __future__ import annotations

import pytest
import torch

from rewardhub_trainer.weights import PackedWeights
from rewardhub_trainer.weights import pack
from rewardhub_trainer.weights import unpack


def _state() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "a.weight": torch.randn(64, 32, generator=g),
        "b.weight": torch.randn(16, 8, generator=g).to(torch.bfloat16),
        "c.bias": torch.randn(7, generator=g).to(torch.float16),
        "d.steps": torch.arange(5),
        "e.t": torch.randn(8, 4, generator=g).t(),  # not contiguous
    }


def test_pack_and_unpack_keep_every_value_and_dtype():
    state = _state()
    packed = pack(state)
    assert isinstance(packed, PackedWeights) and packed.viewed == {"b.weight": "bfloat16"}
    back = unpack(packed)
    assert back.keys() == state.keys()
    for k, v in state.items():
        assert back[k].dtype == v.dtype and back[k].shape == v.shape and torch.equal(back[k], v), k


def test_a_plain_dict_of_tensors_is_still_taken():
    state = _state()
    assert unpack(state).keys() == state.keys()


def test_weights_through_the_object_store_load_into_a_model(ray_session):
    """Through Ray, as the rollouters get them: arrays read-only in the object store, loaded into a
    bf16 model (the rollouter's dtype where the CPU has native bf16) with no warning."""
    import warnings

    import ray

    src = torch.nn.Linear(32, 16)
    dst = torch.nn.Linear(32, 16).to(torch.bfloat16)
    got = ray.get(ray.put(pack(src.state_dict())))
    assert all(not a.flags.writeable for a in got.arrays.values())  # a view of the object store
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dst.load_state_dict(unpack(got))
    assert torch.equal(dst.weight, src.weight.detach().to(torch.bfloat16))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_learner_sends_packed_weights_that_a_rollouter_engine_loads(dtype):
    """``Learner.get_weights`` -> ``Rollouter.set_weights``'s unpacking -> the engine's load."""
    from rewardhub_trainer.actors import Learner

    state = {k: v.to(dtype) for k, v in torch.nn.Linear(4, 3).state_dict().items()}

    class Impl:
        def state_dict(self, copy: bool = True):
            return state

    learner = Learner.__new__(Learner)
    learner.impl = Impl()
    packed = learner.get_weights()
    assert isinstance(packed, PackedWeights)
    back = unpack(packed)
    assert all(torch.equal(back[k], state[k]) and back[k].dtype == dtype for k in state)
