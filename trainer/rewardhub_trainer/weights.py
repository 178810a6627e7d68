"""Weights on their way from the learner to the rollouters: numpy arrays, not torch tensors.

Ray stores a numpy array in its object store as one buffer and hands the reader a view of it, while
a torch tensor is pickled, copied and unpickled. For SmolLM2-135M (540 MB in fp32) one sync took
1.4-3.2 s as a dict of tensors and 0.1-0.3 s as a dict of arrays, on 2 CPU cores; in sync mode that
time is spent on every step with both actors waiting. ``bench/bench_weight_sync.py`` measures both.

Dtypes numpy lacks (bfloat16) travel as same-sized integers and are viewed back on arrival.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import Any

__all__ = ["PackedWeights", "pack", "unpack"]

#: torch dtypes numpy has no type for, and the integer type of the same size they travel as
_VIEWED = {"bfloat16": "int16", "float8_e4m3fn": "int8", "float8_e5m2": "int8"}


@dataclass
class PackedWeights:
    """A state dict as numpy arrays (``arrays``), with the torch dtype of those sent viewed as
    integers (``viewed``: name -> dtype name)."""

    arrays: dict[str, Any]
    viewed: dict[str, str] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.arrays)


def pack(state: Mapping[str, Any]) -> PackedWeights:
    """``state`` (name -> CPU tensor) as arrays that share the tensors' memory (Ray copies them
    into its object store when the actor's method returns)."""
    import torch

    arrays: dict[str, Any] = {}
    viewed: dict[str, str] = {}
    for name, tensor in state.items():
        t = tensor.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        t = t.contiguous()
        dtype = str(t.dtype).removeprefix("torch.")
        if dtype in _VIEWED:
            viewed[name] = dtype
            t = t.view(getattr(torch, _VIEWED[dtype]))
        arrays[name] = t.numpy()
    return PackedWeights(arrays, viewed)


def unpack(weights: PackedWeights | Mapping[str, Any]) -> dict[str, Any]:
    """Tensors over the arrays of ``weights`` (no copy: loading them into a model copies); a plain
    dict of tensors is returned as it is."""
    if not isinstance(weights, PackedWeights):
        return dict(weights)
    import torch

    out: dict[str, Any] = {}
    with warnings.catch_warnings():
        # arrays from Ray's object store are read-only; the tensors are only read (copied into a model)
        warnings.filterwarnings("ignore", message=".*not writable.*")
        for name, array in weights.arrays.items():
            t = torch.from_numpy(array)
            dtype = weights.viewed.get(name)
            out[name] = t.view(getattr(torch, dtype)) if dtype else t
    return out
