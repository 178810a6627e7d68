"""A judge's ``serve:`` (a model rewardhub serves on vLLM replicas, issue 45 §2) is checked when the term
is resolved, before any replica or Ray starts: a bad key or value, and ``serve`` beside ``base_url`` or
``model``, are errors naming the key and the fix. (The replicas themselves: tests/vllm_engine/
test_judge_replicas.py.)"""

from __future__ import annotations

import sys

import pytest

from rewardhub.errors import UsageError
from rewardhub.execution import resolve_terms

MODEL = "/models/judge"


def _resolve(name: str = "llm_judge", **kwargs: object) -> None:
    resolve_terms({"rewards": [{"name": name, "kwargs": kwargs}]})


@pytest.mark.parametrize("name", ["llm_judge", "llm_judge_group"])
@pytest.mark.parametrize("other", [{"base_url": "http://127.0.0.1:8000/v1"}, {"model": "judge"}])
def test_serve_beside_an_endpoint_is_an_error(name, other):
    key = next(iter(other))
    with pytest.raises(UsageError, match=rf"kwargs.serve and kwargs.{key} are both set\nkeep serve"):
        _resolve(name, serve={"model": MODEL}, **other)


@pytest.mark.parametrize("serve,needle", [
    ({"model": MODEL, "replica": 2}, "serve has no key 'replica'\nits keys: model, replicas"),
    ({"replicas": 2}, "serve needs a model"),
    ({"model": MODEL, "replicas": 0}, "serve.replicas=0 is not valid\nuse a whole number"),
    ({"model": MODEL, "replicas": 1.5}, "serve.replicas=1.5 is not valid"),
    ({"model": MODEL, "num_gpus": -1}, "serve.num_gpus=-1 is not valid"),
    ({"model": MODEL, "num_gpus": 0.5}, "serve.share_gpus: true to share"),
    ({"model": MODEL, "port": 70000}, "serve.port=70000 is not valid"),
    ({"model": MODEL, "vllm_args": "--dtype float32"}, "serve.vllm_args="),
    ({"model": MODEL, "env": {"OMP_NUM_THREADS": 1}}, "serve.env="),
    ("judge", "serve='judge' is not a mapping"),
])
def test_a_bad_serve_is_an_error_naming_the_key(serve, needle):
    with pytest.raises(UsageError) as err:
        _resolve(serve=serve)
    assert needle in str(err.value)
    assert str(err.value).startswith("reward term 'llm_judge': llm_judge")


def test_a_valid_serve_resolves_without_starting_anything():
    """Resolving (what `rewardhub check` does) starts no Ray and no replica; a fraction of a GPU is
    accepted once the config says the GPU may be shared."""
    before = "ray" in sys.modules
    _resolve(serve={"model": MODEL, "replicas": 3, "num_gpus": 0.5, "share_gpus": True})
    _resolve("llm_judge_group", serve={"model": MODEL})
    assert ("ray" in sys.modules) == before


def test_without_serve_an_endpoint_is_still_required():
    with pytest.raises(UsageError, match="llm_judge needs kwargs.base_url"):
        _resolve(model="judge")


def test_a_pool_two_runners_share_is_stopped_by_the_last_close(monkeypatch):
    """Two runners of one process that serve the same model share its pool: the first to close leaves
    it to the other (Ray is not up here: closing asks nothing of it)."""
    from rewardhub.builtin import served

    spec = {"model": MODEL}
    pool = served.ServedModel(served.app_name(spec), "http://127.0.0.1:9/x/v1", MODEL, "/tmp", False)
    monkeypatch.setitem(served._LIVE, pool.app, pool)
    assert served.start_served(spec) is pool  # the second runner's
    pool.close()
    assert served.served_endpoint(spec) == (pool.base_url, MODEL)
    pool.close()
    assert pool.app not in served._LIVE
