"""Where ``reward_model`` and ``judge`` load (issue 45 §2): by default on ``cuda`` in a worker Ray gave
GPUs (a reward-model pool with ``n_gpus_per_node``), else on the CPU; an explicit ``device`` wins.

No GPU here: Ray's answer (``ray.get_gpu_ids``) and torch's (``torch.cuda.is_available``) are faked, the
layer below them (which device the model class is built on) is what is checked."""

from __future__ import annotations

import sys
import types

import pytest

import rewardhub_models._loading as loading
import rewardhub_models.discriminative as discriminative
import rewardhub_models.judge as judge_mod
from rewardhub.errors import UsageError


class _Model:
    built: list[str] = []

    def __init__(self, path, *, trust_remote_code, dtype, device):
        _Model.built.append(device)

    def score(self, prompts, responses, **kwargs):
        return [0.0] * len(responses)

    def answer(self, texts, **kwargs):
        return ["Score: 5"] * len(texts)


@pytest.fixture
def fakes(monkeypatch, tmp_path):
    """A Ray worker given ``gpus`` (set on the returned namespace), torch seeing CUDA or not."""
    state = types.SimpleNamespace(gpus=[], cuda=True, path=str(tmp_path))
    ray = types.SimpleNamespace(is_initialized=lambda: True, get_gpu_ids=lambda: list(state.gpus))
    monkeypatch.setitem(sys.modules, "ray", ray)
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: state.cuda)
    monkeypatch.setattr(discriminative, "RewardModel", _Model)
    monkeypatch.setattr(judge_mod, "Judge", _Model)
    monkeypatch.setattr(loading, "_CACHE", {})
    _Model.built = []
    return state


def _call(fn, path, **kwargs):
    raw = getattr(fn, "__wrapped__", fn)
    return raw(prompts=["p"], responses=["r"], model_path=path, **kwargs)


@pytest.mark.parametrize("fn", [discriminative.reward_model, judge_mod.judge])
def test_a_worker_ray_gave_a_gpu_loads_on_cuda(fakes, fn):
    fakes.gpus = [0]
    _call(fn, fakes.path)
    fakes.gpus = []
    loading._CACHE.clear()
    _call(fn, fakes.path)
    assert _Model.built == ["cuda", "cpu"]


def test_an_explicit_device_wins(fakes):
    fakes.gpus = [0]
    _call(discriminative.reward_model, fakes.path, device="cpu")
    assert _Model.built == ["cpu"]


def test_gpus_without_cuda_in_torch_is_a_clear_error(fakes):
    fakes.gpus, fakes.cuda = [1], False
    with pytest.raises(UsageError, match=r"given GPUs \[1\] by Ray, but torch sees no CUDA device\n"):
        _call(discriminative.reward_model, fakes.path)
