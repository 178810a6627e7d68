"""A judge on replicas the run owns (``llm_judge`` ``serve:``) where every worker builds its own runner:
``score --address`` (Ray Data actors) and the trainer (reward workers). The driver starts the served
model once and holds it for the run; each worker finds it running and attaches to it by name, and
leaves it running when it closes; the driver stops it at the end.

Only the vLLM server is a stand-in (a small aiohttp server shadowing ``vllm.entrypoints.openai.api_server``
on the replicas' ``PYTHONPATH``): Ray Serve, its proxy, the replicas and the judge's HTTP path are real.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ray = pytest.importorskip("ray")
pytest.importorskip("ray.serve")
pytest.importorskip("ray.data")
psutil = pytest.importorskip("psutil")
pytestmark = pytest.mark.ray

FAKE_SERVER = '''
import argparse
import os

from aiohttp import web

p = argparse.ArgumentParser()
for flag in ("--port", "--host", "--served-model-name", "--model"):
    p.add_argument(flag)
a, _ = p.parse_known_args()
with open(os.environ["FAKE_LOG"] + ".pids", "a") as f:
    f.write(f"{os.getpid()}\\n")


async def models(_request):
    return web.json_response({"data": [{"id": a.served_model_name}]})


async def chat(request):
    body = await request.json()
    with open(os.environ["FAKE_LOG"] + ".calls", "a") as f:
        f.write(json.dumps(body["messages"][-1]["content"]) + "\\n")
    return web.json_response({"id": "x", "object": "chat.completion", "model": a.served_model_name,
                              "choices": [{"index": 0, "finish_reason": "stop",
                                           "message": {"role": "assistant", "content": "7"}}]})


import json  # noqa: E402

app = web.Application()
app.add_routes([web.get("/v1/models", models), web.post("/v1/chat/completions", chat)])
web.run_app(app, host=a.host, port=int(a.port), print=None)
'''


def _served_judge(tmp_path: Path) -> dict:
    """An llm_judge term served by one replica whose vLLM server is the stand-in."""
    fake = tmp_path / "fake"
    server = fake / "vllm" / "entrypoints" / "openai"
    server.mkdir(parents=True)
    for pkg in (fake / "vllm", fake / "vllm" / "entrypoints", server):
        (pkg / "__init__.py").write_text("")
    (server / "api_server.py").write_text(FAKE_SERVER)
    path = os.pathsep.join([str(fake), *filter(None, [os.environ.get("PYTHONPATH")])])
    serve = {"model": "judge", "replicas": 1, "num_cpus": 0.5, "log_dir": str(tmp_path / "replicas"),
             "env": {"PYTHONPATH": path, "FAKE_LOG": str(tmp_path / "fake")}}
    return {"name": "llm_judge", "weight": 0.5, "kwargs": {"serve": serve, "max_concurrency": 4}}


def _started(tmp_path: Path) -> list[int]:
    pids = tmp_path / "fake.pids"
    return [int(x) for x in pids.read_text().split()] if pids.exists() else []


def _gone(pids: list[int], bound_s: float = 30) -> bool:
    """None of ``pids`` runs (a zombie has ended) within ``bound_s``: a replica's keeper notices within
    half a second that its replica went, then stops the server."""
    end = time.monotonic() + bound_s
    def running(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    while any(map(running, pids)):
        if time.monotonic() > end:
            return False
        time.sleep(0.2)
    return True


@pytest.fixture(scope="module")
def cluster(own_ray):
    from ray.cluster_utils import Cluster
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    c.add_node(num_cpus=4)  # logical CPUs: the trainer's learner, rollouter and reward workers fit
    c.wait_for_nodes()
    try:
        yield c
    finally:
        c.shutdown()


@pytest.mark.timeout(600)
def test_score_address_starts_the_served_judge_once_and_stops_it(cluster, tmp_path):
    """Before: each actor's runner started the app itself, and a run's folder given relatively was not
    found by Ray Data's readers (their working folder is not the caller's)."""
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump({"reward": {
        "workers": {"num_workers": 2}, "rewards": [{"name": "regex_match", "kwargs": {"pattern": "[0-9]"}},
                                                   _served_judge(tmp_path)]}}))
    (tmp_path / "data").mkdir()
    n = 120
    (tmp_path / "data" / "rows.jsonl").write_text("".join(
        json.dumps({"id": i, "prompt": f"q{i}", "response": f"answer number {i}"}) + "\n" for i in range(n)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_") or k.startswith("RAY_AUTH")}
    res = subprocess.run([sys.executable, "-m", "rewardhub", "score", "cfg.yaml", "data", "--no-progress",
                          "-o", "out.jsonl", "--address", cluster.address], capture_output=True, text=True,
                         env={**env, "RAY_USAGE_STATS_ENABLED": "0"}, timeout=500, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    rows = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == list(range(n))
    assert {r["rewards"]["llm_judge"] for r in rows} == {7.0}
    calls = (tmp_path / "fake.calls").read_text().splitlines()
    assert len(calls) == n  # each row judged once
    servers = _started(tmp_path)
    assert len(servers) == 1, f"the served judge started {len(servers)} times"
    assert len(list((tmp_path / "replicas").glob("replica-*.log"))) == 1
    # stopped with the run: its vLLM server is gone and the app with it
    assert _gone(servers)
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        from ray import serve

        assert not serve.status().applications
    finally:
        ray.shutdown()


@pytest.mark.timeout(600)
def test_the_trainer_on_a_cluster_starts_the_served_judge_once_and_stops_it(cluster, tmp_path):
    """``RAY_ADDRESS=... rewardhub train`` (the README's run): the fleet starts the served judge, its reward
    workers attach. Before: the config check started it and deleted it (shutting Serve down), then a reward
    worker started it again, and owned it (two starts; in a run by hand the worker's Serve had no proxy
    on its port, and every judge call failed)."""
    root = Path(__file__).resolve().parents[2]
    cfg = yaml.safe_load((root / "examples" / "tiny.yaml").read_text())
    cfg["trainer"]["total_steps"] = 2
    cfg["reward"] = {"workers": {"num_workers": 1}, "rewards": [
        {"name": "regex_match", "kwargs": {"pattern": "[0-9]"}, "executor": "ray"}, _served_judge(tmp_path)]}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(cfg))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_") or k.startswith("RAY_AUTH")}
    res = subprocess.run([sys.executable, "-m", "rewardhub", "train", "run.yaml", "--output", "run"],
                         capture_output=True, text=True, timeout=540, cwd=tmp_path,
                         env={**env, "RAY_USAGE_STATS_ENABLED": "0", "RAY_ADDRESS": cluster.address})
    assert res.returncode == 0, res.stderr[-3000:]
    samples = 2 * cfg["rollout"]["prompts_per_step"] * cfg["rollout"]["n"]
    assert len((tmp_path / "fake.calls").read_text().splitlines()) == samples  # each sample judged once
    servers = _started(tmp_path)
    assert len(servers) == 1, f"the served judge started {len(servers)} times"
    assert _gone(servers)


@pytest.mark.timeout(120)
def test_the_trainers_config_check_starts_no_served_judge(tmp_path, own_ray):
    """The trainer checks its reward config before Ray starts; the served model is the fleet's to start.
    Before: the check started it (and Ray with it) only to delete it."""
    from rewardhub.config.schema import validate_reward
    from rewardhub_trainer.rewards import validate_rewards

    reward = validate_reward({"rewards": [_served_judge(tmp_path)]})
    validate_rewards(reward)
    assert not _started(tmp_path) and not (tmp_path / "replicas").exists()
    assert not ray.is_initialized()


@pytest.mark.timeout(300)
def test_a_serve_port_another_process_takes_first_is_named_or_picked_again(cluster, tmp_path, monkeypatch):
    """CI: between finding a free port (bind, close) and Serve's proxy binding it, another process took
    it, and ``rewardhub train`` failed with Serve's "Failed to bind to address". Now a port it picked is
    picked again; a port the config names is an error naming it."""
    import socket
    import urllib.request

    from ray.serve.context import _get_global_client

    from rewardhub.builtin import _served_replica
    from rewardhub.builtin import served
    from rewardhub.errors import UsageError

    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    taken = held.getsockname()[1]
    picks, real = [taken], _served_replica.free_port  # the first port it finds, another process then takes
    monkeypatch.setattr(_served_replica, "free_port", lambda: picks.pop() if picks else real())
    spec = _served_judge(tmp_path)["kwargs"]["serve"]
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        named = rf"(?s)serve\.port={taken}: .*127\.0\.0\.1:{taken}.*0 for a free one"
        with pytest.raises(UsageError, match=named):
            served.start_served({**spec, "port": taken})
        assert _get_global_client(raise_if_no_controller_running=False) is None  # nothing left started
        model = served.start_served(spec)
        try:
            assert not picks and f"127.0.0.1:{taken}/" not in model.base_url
            deadline = time.monotonic() + 120  # the replica starts the stand-in server
            while True:
                try:
                    with urllib.request.urlopen(model.base_url + "/models", timeout=10) as r:
                        assert json.load(r)["data"][0]["id"] == "judge"
                    break
                except OSError:
                    assert time.monotonic() < deadline, "the served model never answered through Serve"
                    time.sleep(0.5)
        finally:
            model.close()
        assert _get_global_client(raise_if_no_controller_running=False) is None  # closed with its last user
    finally:
        ray.shutdown()
        held.close()
