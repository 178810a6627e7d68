"""``rewardhub score --address``: the input streamed through Ray Data on a real 3-node cluster
(``ray.cluster_utils.Cluster``, shared by the module) writes the same rows, in the same order, as local
``score``; a node removed mid-run loses no row and scores none twice; a wrong address or file is one
clear error.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ray = pytest.importorskip("ray")
pytest.importorskip("ray.data")
pytestmark = pytest.mark.ray

RULES = {"reward": {"rewards": [
    {"name": "exact_match"},
    {"name": "regex_match", "alias": "boxed", "weight": 0.1, "kwargs": {"pattern": "\\\\boxed\\{.+\\}"}},
]}}

GATED = '''
import os
import time


def gated(*, response, log_dir, half, **kwargs):
    """Scores sample ``r<i>`` as i; from ``half`` on, waits for the gate (the node it ran on is logged)."""
    import ray

    i = int(response[1:])
    if i >= half:
        node = ray.get_runtime_context().get_node_id()
        with open(os.path.join(log_dir, "waiting"), "a") as f:
            f.write(f"{node} {i} {os.getpid()}\\n")
        end = time.monotonic() + 120
        while not os.path.exists(os.path.join(log_dir, "gate")) and time.monotonic() < end:
            time.sleep(0.05)
    return float(i)
'''


@pytest.fixture(scope="module")
def cluster(own_ray):
    from ray.cluster_utils import Cluster
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    for _ in range(3):
        c.add_node(num_cpus=1)
    c.wait_for_nodes()
    try:
        yield c
    finally:
        c.shutdown()


def _env(**extra: str) -> dict[str, str]:
    # the cluster's own auth setting stays (a local Ray started earlier in this process turned tokens on)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_") or k.startswith("RAY_AUTH")}
    env.update(RAY_USAGE_STATS_ENABLED="0", **extra)
    return env


def _score(cfg: Path, data: str, out: Path, *args: str, env: dict[str, str] | None = None,
           timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rewardhub", "score", str(cfg), data, "--no-progress",
                           "-o", str(out), *args], capture_output=True, text=True, env=env or _env(),
                          timeout=timeout, cwd=out.parent)


def _rows(n: int, start: int = 0) -> list[dict]:
    return [{"id": i, "prompt": f"what is {i} mod 5?", "response": f"so \\boxed{{{i % 7}}}",
             "ground_truth": str(i % 5), "extra_info": {"k": [i, None, "é"]}}
            for i in range(start, start + n)]


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def _same_as_local(cluster, tmp_path: Path, data_local: str, data_cluster: str) -> list[dict]:
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump(RULES))
    here, there = tmp_path / "local.jsonl", tmp_path / "cluster.jsonl"
    local = _score(cfg, data_local, here, "--summary-json", str(tmp_path / "local.json"))
    assert local.returncode in (0, 1), local.stderr[-3000:]  # 1: every call of a reward failed
    remote = _score(cfg, data_cluster, there, "--address", cluster.address,
                    "--summary-json", str(tmp_path / "cluster.json"))
    assert remote.returncode == local.returncode, remote.stderr[-3000:]
    assert there.read_bytes() == here.read_bytes()  # the same rows, in the same order, byte for byte
    mine, theirs = (json.loads((tmp_path / f).read_text()) for f in ("local.json", "cluster.json"))
    def figures(summary: dict) -> dict:  # the latencies are each run's own
        return {k: v for k, v in summary["metrics"].items() if "latency" not in k}

    assert theirs["samples"] == mine["samples"] and figures(theirs) == figures(mine)
    assert theirs["pools"][0]["actors"] >= 1
    return [json.loads(x) for x in there.read_text().splitlines()]


@pytest.mark.timeout(600)
def test_a_folder_of_jsonl_files_gives_the_rows_of_local_score(cluster, tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    sizes = [700, 1, 1300]
    start = 0
    for k, n in enumerate(sizes):
        _write_jsonl(folder / f"part-{k}.jsonl", _rows(n, start))
        start += n
    (folder / "part-1.jsonl").write_text((folder / "part-1.jsonl").read_text() + "\n   \n")  # blank lines
    rows = _same_as_local(cluster, tmp_path, str(folder / "*.jsonl"), str(folder))
    assert [r["id"] for r in rows] == list(range(sum(sizes)))


@pytest.mark.timeout(600)
def test_parquet_files_give_the_rows_of_local_score(cluster, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    rows = _rows(2500)
    for r in rows:
        r["extra_info"] = {"k": r["id"]}  # one struct type for parquet
    pq.write_table(pa.Table.from_pylist(rows[:1800]), tmp_path / "a.parquet", row_group_size=500)
    pq.write_table(pa.Table.from_pylist(rows[1800:]), tmp_path / "b.parquet")
    out = _same_as_local(cluster, tmp_path, str(tmp_path / "*.parquet"), str(tmp_path / "*.parquet"))
    assert [r["id"] for r in out] == list(range(2500))


@pytest.mark.timeout(600)
def test_ray_address_in_the_environment_and_errors_name_the_input_row(cluster, tmp_path):
    """RAY_ADDRESS alone sends score to the cluster; on_failure: raise names the row by its place in the
    whole input (a batch's actor does not know it), as local score does."""
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump({"reward": {"rewards": [
        {"path": str(tmp_path / "fails.py"), "function": "fails", "on_failure": "raise"}]}}))
    (tmp_path / "fails.py").write_text("def fails(*, response, **kw):\n"
                                       "    if response == 'bad':\n        raise ValueError('no')\n"
                                       "    return 1.0\n")
    _write_jsonl(tmp_path / "d.jsonl", [{"response": "ok"}] * 1500 + [{"response": "bad"}])
    for env in (_env(), _env(RAY_ADDRESS=cluster.address)):
        run = _score(cfg, str(tmp_path / "d.jsonl"), tmp_path / "o.jsonl", env=env)
        assert run.returncode == 1 and "row 1501" in run.stderr, run.stderr[-3000:]
        assert "Traceback" not in run.stderr


@pytest.mark.timeout(120)
def test_an_unreachable_address_or_a_missing_file_is_one_clear_error(tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump(RULES))
    _write_jsonl(tmp_path / "d.jsonl", _rows(3))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    began = time.monotonic()
    run = _score(cfg, str(tmp_path / "d.jsonl"), tmp_path / "o.jsonl", "--address", f"127.0.0.1:{port}")
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert f"no Ray cluster at --address 127.0.0.1:{port}: nothing listens" in run.stderr, run.stderr
    assert f"ray start --head --port={port}" in run.stderr
    assert time.monotonic() - began < 60  # not Ray's minutes of retries
    assert not (tmp_path / "o.jsonl").exists()
    run = _score(cfg, str(tmp_path / "missing.jsonl"), tmp_path / "o.jsonl", "--address", "127.0.0.1:1")
    assert run.returncode != 0 and "no such file or folder" in run.stderr and "Traceback" not in run.stderr
    gz = tmp_path / "d.jsonl.gz"
    subprocess.run(["gzip", "-k", str(tmp_path / "d.jsonl")], check=True)
    run = _score(cfg, str(gz), tmp_path / "o.jsonl", "--address", "127.0.0.1:1")
    assert "a gzip+jsonl file; score --address reads plain JSONL and parquet" in run.stderr, run.stderr


@pytest.mark.timeout(600)
def test_a_node_removed_mid_run_loses_no_row_and_scores_none_twice(cluster, tmp_path):
    n = 3000
    reward = tmp_path / "gated.py"
    reward.write_text(GATED)
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump({"reward": {
        "rewards": [{"path": str(reward), "function": "gated", "kwargs": {"log_dir": str(tmp_path),
                                                                         "half": n // 2}}],
        "workers": {"num_workers": 2}}}))  # 3 nodes of 1 CPU: a lost actor has a node to start again on
    _write_jsonl(tmp_path / "d.jsonl", [{"id": i, "response": f"r{i}"} for i in range(n)])
    out = tmp_path / "out.jsonl"
    with open(tmp_path / "stderr", "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "rewardhub", "score", str(cfg),
                                 str(tmp_path / "d.jsonl"), "--no-progress", "-o", str(out),
                                 "--address", cluster.address],
                                stderr=err, env=_env(), cwd=tmp_path)
        try:
            end = time.monotonic() + 300
            waiting: list[list[str]] = []
            while not waiting:
                assert proc.poll() is None, (tmp_path / "stderr").read_text()[-3000:]
                assert time.monotonic() < end, "no actor reached the second half"
                time.sleep(0.1)
                path = tmp_path / "waiting"
                waiting = [x.split() for x in path.read_text().splitlines()] if path.exists() else []
            victim = next(node for node in cluster.list_all_nodes() if node.node_id == waiting[0][0])
            cluster.remove_node(victim, allow_graceful=False)
            (tmp_path / "gate").touch()
            rc = proc.wait(timeout=400)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            cluster.add_node(num_cpus=1)  # the module's next test has three nodes again
            cluster.wait_for_nodes()
    stderr = (tmp_path / "stderr").read_text()
    assert rc == 0, stderr[-3000:]
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == list(range(n))  # each row once, in order: none lost, none twice
    assert [r["score"] for r in rows] == [float(i) for i in range(n)]


@pytest.mark.timeout(600)
def test_random_small_inputs_give_the_rows_of_local_score(cluster):
    """Property: for any small input (text of any kind, a missing or null ground truth, extra columns),
    ``score --address`` writes what local ``score`` writes."""
    import tempfile

    from hypothesis import given
    from hypothesis import settings
    from hypothesis import strategies as st

    text = st.text(max_size=12)
    row = st.fixed_dictionaries({"response": text}, optional={
        "ground_truth": st.one_of(st.none(), text), "prompt": text,
        "extra_info": st.dictionaries(st.sampled_from("abc"), st.integers(-5, 5), max_size=2)})

    @settings(max_examples=3, deadline=None, derandomize=True, database=None)
    @given(st.lists(row, min_size=1, max_size=40))
    def check(rows: list[dict]) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            _write_jsonl(Path(tmp) / "d.jsonl", rows)
            out = _same_as_local(cluster, Path(tmp), str(Path(tmp) / "d.jsonl"), str(Path(tmp) / "d.jsonl"))
            assert len(out) == len(rows)

    check()


@pytest.mark.timeout(600)
def test_sigterm_keeps_the_rows_written_in_order(cluster, tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump(RULES))
    _write_jsonl(tmp_path / "d.jsonl", _rows(200_000))
    out = tmp_path / "out.jsonl"
    with open(tmp_path / "stderr", "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "rewardhub", "score", str(cfg),
                                 str(tmp_path / "d.jsonl"), "--no-progress", "-o", str(out),
                                 "--address", cluster.address], stdout=subprocess.PIPE, stderr=err,
                                text=True, env=_env(), cwd=tmp_path)
        try:
            end = time.monotonic() + 300
            while not any(len(p.read_bytes().splitlines()) > 2000 for p in tmp_path.glob(".out.jsonl.*.tmp")):
                assert proc.poll() is None, (tmp_path / "stderr").read_text()[-3000:]
                assert time.monotonic() < end, "no rows written"
                time.sleep(0.2)
            proc.terminate()
            stdout, _ = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    stderr = (tmp_path / "stderr").read_text()
    assert proc.returncode == 143, stderr[-3000:]
    assert "ERROR: interrupted (SIGTERM) after" in stderr and stdout == ""
    kept = [json.loads(x) for x in (tmp_path / "out.jsonl.partial").read_text().splitlines()]
    assert len(kept) > 2000 and [r["id"] for r in kept] == list(range(len(kept)))
    assert not out.exists()
