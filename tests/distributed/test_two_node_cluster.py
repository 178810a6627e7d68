"""A real two-node cluster started with ``ray start``, the second node with another rewardhub-math.

The head (this host's driver node, no CPUs of its own) sees the installed rewardhub-math; the second
node, started with a copy of it built as version 0.2.0 first on its ``PYTHONPATH``, is the only node
with CPUs and a ``node2`` resource, so every reward worker (and every trainer actor that asks for a
CPU) runs there. Only the rewards a run uses must match: a config that uses ``math_verify`` stops
with one line naming it, both versions and the node; one that does not runs, and ``rewardhub
doctor`` reports the difference as a warning. Everything runs through the CLI, in other processes,
as a user would; the cluster is stopped by killing the processes this module started (never ``ray
stop``, which would stop every Ray of the host).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

pytest.importorskip("ray")
pytestmark = pytest.mark.ray

REPO = Path(__file__).resolve().parents[2]
RAY = str(Path(sys.executable).with_name("ray"))
DRIVER_MATH = version("rewardhub-math")
OTHER_MATH = "0.2.0" if DRIVER_MATH != "0.2.0" else "0.3.0"

REWARD_FILE = "def has_digit(*, response, **kwargs):\n    return float(any(c.isdigit() for c in response))\n"


def _free_ports(n: int) -> list[int]:
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _other_math_site(root: Path) -> Path:
    """rewardhub-math at OTHER_MATH, installed (``pip install --target``) from a copy of the plugin."""
    src = root / "src"
    shutil.copytree(REPO / "plugins" / "rewardhub-math", src,
                    ignore=shutil.ignore_patterns("*.egg-info", "tests", "build", "__pycache__"))
    project = src / "pyproject.toml"
    text = project.read_text()
    assert f'version = "{DRIVER_MATH}"' in text
    project.write_text(text.replace(f'version = "{DRIVER_MATH}"', f'version = "{OTHER_MATH}"'))
    site = root / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(site), str(src)], check=True, capture_output=True, timeout=180)
    assert (site / f"rewardhub_math-{OTHER_MATH}.dist-info").is_dir()
    return site


def _children() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        out.setdefault(ppid, []).append(int(entry))
    return out


def _descendants(roots: list[int]) -> set[int]:
    tree, seen, todo = _children(), set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid not in seen:
            seen.add(pid)
            todo += tree.get(pid, [])
    return seen


def _stop(procs: list[subprocess.Popen]) -> None:
    """SIGTERM this module's ``ray start`` process groups, then SIGKILL whatever of them is left.

    Ray's worker processes get process groups of their own: they are found first, as descendants
    of the ``ray start`` processes (once their raylet is gone they would no longer be).
    """
    mine = _descendants([p.pid for p in procs])
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGTERM)  # start_new_session: the group is the process's own
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 3
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for pid in mine | _descendants([p.pid for p in procs]):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait(timeout=10)


def _start(args: list[str], env: dict[str, str], log: Path, procs: list[subprocess.Popen]) -> None:
    """``ray start ... --block`` in a session of its own; returns once it says the node runs."""
    with open(log, "wb") as out:
        procs.append(subprocess.Popen([RAY, "start", *args, "--block"], env=env, stdout=out,
                                      stderr=subprocess.STDOUT, start_new_session=True))
    deadline = time.monotonic() + 120
    while b"Ray runtime started" not in log.read_bytes():
        if procs[-1].poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"ray start {args[0]} failed:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)


def _ports() -> list[str]:
    names = ["dashboard-agent-listen-port", "dashboard-agent-grpc-port", "runtime-env-agent-port",
             "metrics-export-port", "node-manager-port", "object-manager-port"]
    return [f"--{name}={port}" for name, port in zip(names, _free_ports(len(names)))]


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    root = tmp_path_factory.mktemp("two-nodes")
    site = _other_math_site(root)
    # a short folder: Ray's socket paths inside it must stay under the 107-byte limit
    ray_tmp = tempfile.mkdtemp(prefix="rh2n-", dir="/tmp")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0", HF_HUB_OFFLINE="1")
    port, client, dashboard = _free_ports(3)
    address = f"127.0.0.1:{port}"
    procs: list[subprocess.Popen] = []
    common = ["--temp-dir", ray_tmp, "--disable-usage-stats", "--object-store-memory", str(100 * 2**20)]
    try:
        _start(["--head", f"--port={port}", "--num-cpus=0", "--include-dashboard=false",
                f"--dashboard-port={dashboard}", f"--ray-client-server-port={client}", *common, *_ports()],
               env, root / "head.log", procs)
        node2_env = {
            **env,
            "PYTHONPATH": os.pathsep.join([str(site), *filter(None, [env.get("PYTHONPATH")])]),
        }
        _start([f"--address={address}", "--num-cpus=4", '--resources={"node2": 100}', *common, *_ports()],
               node2_env, root / "node2.log", procs)
        # both nodes registered, and their ids (from a driver of its own)
        probe = ("import json, sys, time, ray\nray.init(address=sys.argv[1], log_to_driver=False)\n"
                 "end = time.monotonic() + 60\n"
                 "while len([n for n in ray.nodes() if n['Alive']]) < 2 and time.monotonic() < end:\n"
                 "    time.sleep(0.2)\n"
                 "print(json.dumps([[n['NodeID'], n['Resources']] for n in ray.nodes() if n['Alive']]))\n")
        out = subprocess.run([sys.executable, "-c", probe, address], env=env, capture_output=True, text=True,
                             timeout=120, check=True).stdout
        nodes = json.loads(out.strip().splitlines()[-1])
        assert len(nodes) == 2, nodes
        head = next(i for i, r in nodes if "node:__internal_head__" in r)
        node2 = next(i for i, r in nodes if "node2" in r)
        yield SimpleNamespace(address=address, env=env, head=head, node2=node2, root=root)
    finally:
        _stop(procs)
        shutil.rmtree(ray_tmp, ignore_errors=True)


def _cli(cluster, *args: str, env: dict[str, str] | None = None, timeout: float = 180):
    return subprocess.run([sys.executable, "-m", "rewardhub", *args], capture_output=True, text=True,
                          env={**cluster.env, **(env or {})}, cwd=cluster.root, timeout=timeout)


def _config(cluster, name: str, rewards: list[dict]) -> Path:
    path = cluster.root / f"{name}.yaml"
    for term in rewards:
        term.setdefault("executor", "ray")
    path.write_text(yaml.safe_dump({"reward": {"rewards": rewards, "workers": {
        "num_workers": 1, "num_cpus": 1, "resources": {"node2": 1}, "address": cluster.address}}}))
    return path


def _data(cluster) -> Path:
    path = cluster.root / "data.jsonl"
    rows = [{"prompt": "q", "response": "so \\boxed{12}", "ground_truth": "12"},
            {"prompt": "q", "response": "no idea", "ground_truth": "12"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.timeout(300)
def test_a_used_reward_that_differs_on_the_worker_node_stops_scoring_naming_it(two_nodes):
    cfg = _config(two_nodes, "uses_math", [{"name": "math_verify"}])
    t0 = time.monotonic()
    res = _cli(two_nodes, "score", str(cfg), str(_data(two_nodes)), "--no-progress")
    assert time.monotonic() - t0 < 120
    assert res.returncode == 1, res.stderr
    errors = [line for line in res.stderr.splitlines() if not line.startswith(("20", "WARNING"))]
    assert len(errors) == 1 and errors[0].startswith("ERROR: "), res.stderr  # one line, nothing after it
    line = errors[0]
    assert (f"reward 'math_verify' has a different version: driver rewardhub-math=={DRIVER_MATH}, "
            f"worker rewardhub-math=={OTHER_MATH}") in line
    assert f"node id {two_nodes.node2[:12]}" in line and "worker 0 of pool 'reward'" in line
    assert "install the same distributions" in line
    assert res.stdout == ""  # no row was scored


@pytest.mark.timeout(300)
def test_a_reward_the_config_does_not_use_may_differ(two_nodes):
    """Scoring with a built-in and a file reward runs on the second node; the difference is a warning."""
    reward = two_nodes.root / "digits.py"
    reward.write_text(REWARD_FILE)
    cfg = _config(two_nodes, "no_math", [{"name": "regex_match", "kwargs": {"pattern": "[0-9]"}},
                                         {"path": str(reward), "function": "has_digit"}])
    summary = two_nodes.root / "summary.json"
    out = two_nodes.root / "scored.jsonl"
    res = _cli(two_nodes, "score", str(cfg), str(_data(two_nodes)), "--no-progress", "-o", str(out),
               "--summary-json", str(summary))
    assert res.returncode == 0, res.stderr
    assert [json.loads(x)["score"] for x in out.read_text().splitlines()] == [2.0, 0.0]
    [notice] = [line for line in res.stderr.splitlines() if "registry differs" in line]
    assert notice.startswith("WARNING: reward worker 0 of pool 'reward' on node ") and notice.endswith(
        f"(node id {two_nodes.node2[:12]}): registry differs in rewards the config does not use: math_verify")
    used = {r["name"]: r for r in json.loads(summary.read_text())["rewards"]}
    assert set(used) == {"regex_match", "has_digit"}
    rx, mine = used["regex_match"], used["has_digit"]
    assert (rx["source"], rx["dist"], rx["target"]) == (
        "builtin",
        "rewardhub",
        "rewardhub.builtin.format:regex_match",
    )
    assert mine["sha256"] == hashlib.sha256(reward.read_bytes()).hexdigest() and mine["source"] == "config"
    for r in (rx, mine):
        [worker] = r["workers"]
        # the worker's own values, from the registry it built on the second node
        assert worker["node"] == two_nodes.node2 and worker["pid"]
        assert {k: worker[k] for k in ("source", "dist", "version", "sha256")} == {
            k: r[k] for k in ("source", "dist", "version", "sha256")}
        # a file reward is shipped: on the node it is a copy, with the same hash
        assert (
            worker["target"] == r["target"] if r is rx else worker["target"].endswith("/digits.py:has_digit")
        )
        assert worker["identity"] == (f"sha256:{r['sha256']}" if r is mine else f"rewardhub=={rx['version']}")


@pytest.mark.timeout(300)
def test_doctor_reports_the_whole_registry_difference_as_a_warning(two_nodes):
    expected = (f"reward 'math_verify' has a different version: driver rewardhub-math=={DRIVER_MATH}, "
                f"worker rewardhub-math=={OTHER_MATH}")
    cfg = _config(two_nodes, "no_math", [{"name": "regex_match", "kwargs": {"pattern": "[0-9]"}}])
    res = _cli(two_nodes, "doctor", str(cfg), "--address", two_nodes.address)
    assert res.returncode == 0, res.stderr
    node2 = next(i for i, line in enumerate(res.stdout.splitlines()) if f"id {two_nodes.node2[:12]}" in line)
    lines = res.stdout.splitlines()
    assert lines[node2].endswith("ok") and lines[node2 + 1] == f"    WARNING: {expected}"
    assert ("WARNING: 1 of 2 nodes differ from the driver in reward(s) 'math_verify', which the config "
            "does not use") in res.stderr
    assert "ERROR" not in res.stderr

    # no config: every reward is compared, and a difference is still a warning
    res = _cli(two_nodes, "doctor", "--address", two_nodes.address, "--json")
    assert res.returncode == 0, res.stderr
    nodes = {n["node_id"]: n for n in json.loads(res.stdout)["nodes"]}
    assert set(nodes) == {two_nodes.head, two_nodes.node2}
    assert nodes[two_nodes.node2]["warnings"] == [expected] and nodes[two_nodes.node2]["ok"]
    assert nodes[two_nodes.head]["warnings"] == [] and nodes[two_nodes.head]["problems"] == []
    assert "no config names a reward" in res.stderr

    # --strict, or a config that uses the reward: an error naming it
    for args in ([str(cfg), "--strict"], [str(_config(two_nodes, "uses_math", [{"name": "math_verify"}]))]):
        res = _cli(two_nodes, "doctor", *args, "--address", two_nodes.address)
        assert res.returncode == 1, res.stderr
        assert f"    {expected}" in res.stdout.splitlines()
        assert "ERROR: 1 of 2 nodes differ from the driver in reward(s) 'math_verify'" in res.stderr


def _train_config(cluster, name: str, rewards: list[dict]) -> Path:
    """A tiny training run whose rollouter, learner and reward worker all run on the second node."""
    cfg = yaml.safe_load((REPO / "examples" / "tiny.yaml").read_text())
    cfg["trainer"].update(total_steps=2, checkpoint_every=0)
    cfg["rollout"].update(n=4, prompts_per_step=2, max_new_tokens=8)
    # the head has no CPUs: whatever asks for one runs on the second node
    cfg["resources"] = {"learner": {"num_cpus": 1}, "rollouter": {"num_cpus": 1}}
    cfg["reward"] = {"rewards": rewards, "workers": {"num_cpus": 1, "resources": {"node2": 1}}}
    path = cluster.root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _train(cluster, config: Path, out: Path):
    return _cli(cluster, "train", str(config), "--output", str(out), timeout=240,
                env={"RAY_ADDRESS": cluster.address, "REWARDHUB_CACHE": str(cluster.root / "cache")})


@pytest.mark.timeout(300)
def test_a_training_run_on_the_node_with_another_version_is_not_stopped(two_nodes):
    """The issue's run: rollouter, learner and reward worker on the node with the other
    rewardhub-math; the config never names math_verify. It trains to its last step."""
    pytest.importorskip("rewardhub_trainer")
    out = two_nodes.root / "run"
    config = _train_config(two_nodes, "train", [{"name": "regex_match", "kwargs": {"pattern": "[0-9]"}}])
    res = _train(two_nodes, config, out)
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["accounting_exact"] is True
    where = {w["role"]: w["node"] for w in summary["workers"]}
    assert where["rollouter"] == where["learner"] == where["reward_worker"] == two_nodes.node2
    worker = next(w for w in summary["workers"] if w["role"] == "reward_worker")
    assert worker["registry_fingerprint"] != summary["driver_fingerprint"]  # the registries differ...
    [rx] = summary["rewards"]
    assert rx["name"] == "regex_match" and rx["identity"]
    assert [w["identity"] for w in rx["workers"]] == [rx["identity"]]  # ...but not in the reward it uses


@pytest.mark.timeout(300)
def test_a_training_run_that_uses_the_differing_reward_stops_naming_it(two_nodes):
    """The workers are checked against the driver's registry, wherever Ray puts the reward client:
    it asks for no CPU, so it may run on either node (after another run, typically on the second
    one, where it once took that node's rewardhub-math as the reference and the run trained)."""
    pytest.importorskip("rewardhub_trainer")
    config = _train_config(two_nodes, "train_math", [{"name": "math_verify"}])
    out = two_nodes.root / "run_math"
    t0 = time.monotonic()
    res = _train(two_nodes, config, out)
    assert time.monotonic() - t0 < 200
    assert res.returncode == 1, res.stderr[-3000:]
    errors = [line for line in res.stderr.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and errors[0] == res.stderr.rstrip().splitlines()[-1], res.stderr[-3000:]
    line = errors[0]
    # the process that calls rewards says it, naming the reward, both versions and the node
    assert line.startswith("ERROR: reward_client on ") and "rollouter" not in line and "learner" not in line
    assert (f"reward 'math_verify' has a different version: driver rewardhub-math=={DRIVER_MATH}, "
            f"worker rewardhub-math=={OTHER_MATH} (node ") in line
    assert f"node id {two_nodes.node2[:12]}, worker 0 of pool 'reward'" in line
    assert not (out / "summary.json").exists()


_CLIENT_ON_NODE2 = """
import json, sys, ray
from rewardhub.config.schema import validate_reward
from rewardhub.distributed import prepare_setup
from rewardhub_trainer.actors import RewardClient
ray.init(address=sys.argv[1], log_to_driver=False)
cfg = validate_reward({"rewards": [{"name": "math_verify"}],
                       "workers": {"num_cpus": 1, "resources": {"node2": 1}}})
reference, _ = prepare_setup(cfg)  # here, in the driver: rewardhub-math as installed here
out = {}
for name, ref in (("reference", reference), ("none", None)):
    client = ray.remote(RewardClient).options(num_cpus=0, resources={"node2": 1}).remote(cfg, reference=ref)
    out[name] = ray.get(client.info.remote(), timeout=150)
    ray.get(client.close.remote(), timeout=60)
    ray.kill(client)
print(json.dumps(out))
"""


@pytest.mark.timeout(300)
def test_a_reward_client_on_the_other_node_checks_its_workers_against_the_driver(two_nodes):
    """The trainer's reward client is an actor Ray may place on either node; placed on the second
    one, it still holds its workers to the driver's rewardhub-math, not to the one it imports."""
    pytest.importorskip("rewardhub_trainer")
    res = subprocess.run([sys.executable, "-c", _CLIENT_ON_NODE2, two_nodes.address], env=two_nodes.env,
                         capture_output=True, text=True, timeout=240, cwd=two_nodes.root)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["reference"]["node"] == out["none"]["node"] == two_nodes.node2
    assert (f"reward 'math_verify' has a different version: driver rewardhub-math=={DRIVER_MATH}, "
            f"worker rewardhub-math=={OTHER_MATH}") in out["reference"]["error"]
    # without the driver's reference the client compares the workers with its own node's registry:
    # the same rewardhub-math as theirs, so nothing is found (what made a training run slip through)
    assert "error" not in out["none"], out["none"]
