"""`rewardhub doctor`: an address where no Ray cluster answers is one ERROR within seconds (SIGTERM
honoured meanwhile); plugins (the trainer among them) add their lines through `rewardhub_doctor_lines`,
and the core never imports the trainer."""

from __future__ import annotations

import ast
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import rewardhub

REPO = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.timeout(120)
def test_an_address_where_nothing_listens_is_one_error_at_once(cli):
    port = _free_port()
    began = time.monotonic()
    res = cli("doctor", "--address", f"127.0.0.1:{port}")
    took = time.monotonic() - began
    assert res.returncode == 1, res.stderr
    assert res.stderr.splitlines()[0] == (
        f"ERROR: no Ray cluster at --address 127.0.0.1:{port}: nothing listens on "
        f"port {port} of 127.0.0.1 (connection refused)"
    )
    assert "Failed to connect" not in res.stderr and "Traceback" not in res.stderr
    assert took < 60  # not Ray's minutes of retries (with room for start-up on a loaded host)


@pytest.mark.parametrize("address,says", [("no-such-host.invalid:6379", "is not known"),
                                          ("127.0.0.1:port", "is not a number")])
def test_an_address_that_cannot_be_a_cluster_is_one_error(cli, address, says):
    res = cli("doctor", "--address", address)
    assert res.returncode == 1 and res.stderr.startswith("ERROR: ") and says in res.stderr, res.stderr


@pytest.fixture
def listener():
    """A port that accepts connections and says nothing: not a Ray cluster."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held, stop = [], threading.Event()

    def accept():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    for c in held:
        c.close()
    server.close()


@pytest.mark.timeout(90)
def test_sigterm_stops_doctor_while_ray_connects(listener, tmp_path):
    pytest.importorskip("ray")
    err = tmp_path / "err"
    with open(err, "wb") as f:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rewardhub", "doctor", "--address", f"127.0.0.1:{listener}"],
            stdout=subprocess.DEVNULL,
            stderr=f,
        )
        try:
            deadline = time.monotonic() + 60
            while b"Connecting to existing Ray cluster" not in err.read_bytes():  # ray.init is under way
                assert proc.poll() is None and time.monotonic() < deadline, err.read_text()
                time.sleep(0.05)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=10) == 143
        finally:
            proc.kill()
    assert f"ERROR: interrupted (SIGTERM) while connecting to Ray at 127.0.0.1:{listener}" in err.read_text()


@pytest.mark.timeout(90)
def test_a_port_that_is_not_ray_is_one_error_within_15_s(listener, cli):
    pytest.importorskip("ray")
    began = time.monotonic()
    res = cli("doctor", "--address", f"127.0.0.1:{listener}")
    assert res.returncode == 1
    assert "ERROR: Ray did not connect to" in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert time.monotonic() - began < 15 + 10  # 10 s to connect; start-up on a loaded host


# ---- plugins' lines ----------------------------------------------------------------------------

PLUGIN = """
import rewardhub

@rewardhub.hookimpl
def rewardhub_doctor_lines(config, nodes):
    return [f"gpu plugin: {len(nodes)} node(s), {config.reward.rewards[0].name}"
            + ("  PROBLEM" if not nodes else "")]
"""

FAILING = """
import rewardhub

@rewardhub.hookimpl
def rewardhub_doctor_lines(config, nodes):
    raise RuntimeError("boom")
"""


def test_plugins_add_their_lines_and_a_failing_one_is_named(tmp_path, monkeypatch, capsys):
    from rewardhub._commands.doctor import _plugin_lines
    from rewardhub.config import load_plan
    from rewardhub.testing import write_distribution

    write_distribution(tmp_path, "gpu-plugin", "2.0", {"rewardhub": {"gpu_plugin": "gpu_plugin"}},
                       {"gpu_plugin": PLUGIN})
    write_distribution(tmp_path, "boom-plugin", "0.3", {"rewardhub": {"boom_plugin": "boom_plugin"}},
                       {"boom_plugin": FAILING})
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("REWARDHUB_NO_CACHE", "1")
    nodes = [{"node_id": "a" * 40, "ip": "10.0.0.1", "is_head": True, "resources": {"CPU": 4.0, "GPU": 1.0},
              "ok": True, "problems": []}]
    plan = load_plan(None, ["reward.rewards=[{name: exact_match}]", "trainer.n_gpus_per_node=1"])
    lines = _plugin_lines(plan, {"nodes": nodes})
    assert "gpu plugin: 1 node(s), exact_match" in lines
    if _trainer_plugin_installed():  # the trainer's lines, through its hook
        assert "trainer pools (resources:):" in lines
    err = capsys.readouterr().err
    assert err.startswith("WARNING: plugin boom_plugin (from boom-plugin 0.3): rewardhub_doctor_lines "
                          "RuntimeError: boom"), err


def _trainer_plugin_installed() -> bool:
    """Whether the installed trainer declares its plugin (an install from before it did has no lines)."""
    import importlib.metadata

    return any(
        ep.value == "rewardhub_trainer.hooks" for ep in importlib.metadata.entry_points(group="rewardhub")
    )


def test_the_core_never_imports_the_trainer():
    """No module of ``rewardhub`` imports ``rewardhub_trainer``, at the top or inside a function: the
    trainer adds to the core through hooks (``rewardhub_doctor_lines``) and entry points."""
    bad = []
    for path in sorted(Path(rewardhub.__file__).parent.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            bad += [f"{path.relative_to(REPO)}:{node.lineno}: {n}" for n in names
                    if n.split(".")[0] == "rewardhub_trainer"]
            if isinstance(node, ast.Call) and any(
                isinstance(a, ast.Constant) and str(a.value).startswith("rewardhub_trainer")
                for a in node.args
            ):
                bad.append(f"{path.relative_to(REPO)}:{node.lineno}: a dynamic import of the trainer")
    assert bad == []
