"""Reduced isolation: the reward still runs, says once what is not enforced, and the tests state it.

bubblewrap is forced off (``native`` mode: the launcher's own namespaces) or every namespace is
(``plain`` mode, as on a host that forbids them). What each mode does and does not enforce is
asserted here as it is: in plain mode a program CAN reach a loopback listener.
"""

from __future__ import annotations

import socket
import warnings

import pytest
from code_tasks import fenced
from rewardhub_code import sandbox
from rewardhub_code.reward import SandboxUnavailableError
from rewardhub_code.reward import code_tests

from rewardhub.errors import RewardhubWarning

NATIVE = {"use_bwrap": False}
PLAIN = {"use_namespaces": False, "python": "/usr/bin/python3"}
ADD = fenced("def add(a, b):\n    return a + b")
TESTS = ["assert add(2, 3) == 5"]


def _connects(port: int) -> str:
    return fenced(
        f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1).sendall(b'hi')\n"
        "def add(a, b):\n    return a + b"
    )


@pytest.fixture
def listener():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    srv.settimeout(1.0)
    yield srv
    srv.close()


def test_full_isolation_here_gives_no_warning(fresh_warnings, isolation):
    if isolation["mode"] != "bwrap":
        pytest.skip(f"this machine runs the sandbox in {isolation['mode']!r} mode")
    assert all(isolation["enforced"].values()), isolation
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert code_tests(response=ADD, ground_truth=TESTS)["score"] == 1.0


def test_native_mode_warns_once_and_still_isolates_the_network(fresh_warnings, listener):
    report = sandbox.isolation_report(sandbox.SandboxLimits(**NATIVE))
    if report["mode"] != "native":
        pytest.skip("native namespaces are not available here")
    assert report["enforced"]["network_namespace"] and not report["enforced"]["pid_namespace"]
    # said, not pretended: the launcher's runtime-only root where it could build one, else the host's tree
    assert report["enforced"]["read_only_root_fs"] is report["visible"]["runtime_only"]
    first = "pid_namespace" if report["visible"]["runtime_only"] else "read_only_root_fs"
    with pytest.warns(RewardhubWarning, match=f"native mode\\) cannot enforce: {first}"):
        assert code_tests(response=ADD, ground_truth=TESTS, local=NATIVE)["score"] == 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per process
        out = code_tests(response=_connects(listener.getsockname()[1]), ground_truth=TESTS, local=NATIVE)
    assert out["score"] == 0.0
    with pytest.raises(TimeoutError):
        listener.accept()


def test_plain_mode_states_that_the_network_is_not_isolated(fresh_warnings, listener):
    report = sandbox.isolation_report(sandbox.SandboxLimits(**PLAIN))
    assert report["mode"] == "plain" and not report["enforced"]["network_namespace"]
    assert any("CAN use the network" in n for n in report["notes"])
    with pytest.warns(RewardhubWarning, match="cannot enforce: network_namespace") as rec:
        out = code_tests(response=_connects(listener.getsockname()[1]), ground_truth=TESTS, local=PLAIN)
    assert "reward.sandbox.url" in str(rec[0].message)
    # the limitation, as it is: without a network namespace the program reaches the listener
    assert out["score"] == 1.0
    conn, _ = listener.accept()
    assert conn.recv(2) == b"hi"
    conn.close()


def test_plain_mode_still_limits_time_memory_env_and_cleans_up(fresh_warnings, monkeypatch):
    monkeypatch.setenv("RHC_FAKE_SECRET", "rhc-plain-secret")
    cfg = sandbox.SandboxLimits(**PLAIN, timeout_s=1.0)
    res = sandbox.run_python({"m.py": "import os\nprint(dict(os.environ))"}, "m.py", config=cfg)
    assert res.status == "ok" and "rhc-plain-secret" not in res.stdout
    assert sandbox.run_python({"m.py": "import time\ntime.sleep(30)"}, "m.py", config=cfg).status == "timeout"
    assert sandbox.run_python({"m.py": "x = bytearray(10 << 30)"}, "m.py", config=cfg).status == "memory"
    # (no_leftovers checks that nothing outlived the runs)


def test_plain_mode_with_an_unreachable_interpreter_is_a_sandbox_error(fresh_warnings):
    cfg = sandbox.SandboxLimits(use_namespaces=False)  # the default interpreter lives under /root here
    if sandbox._reachable_by_others(sandbox._interpreter(cfg)[0]) or not sandbox.isolation_report(cfg)[
            "enforced"]["unprivileged_uid"]:
        pytest.skip("the default interpreter is reachable by other users here")
    with pytest.warns(RewardhubWarning), pytest.raises(SandboxUnavailableError, match="set local.python"):
        code_tests(response=ADD, ground_truth=TESTS, local={"use_namespaces": False})


NOT_ROOT_SCRIPT = r'''
import json, socket, sys
sys.path.insert(0, sys.argv[1])  # argv: -c, the folder holding a copy of rewardhub_code, port, harness file
from rewardhub_code import sandbox as s
port = int(sys.argv[2])
cfg = s.SandboxLimits(python="/usr/bin/python3", timeout_s=5, pids_max=16)
forks = ("import os, time\nn = 0\nfor _ in range(200):\n    try:\n        pid = os.fork()\n"
         "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(30)\n        os._exit(0)\n"
         "    n += 1\nprint(n)")
net = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)"
out = {"report": s.isolation_report(cfg),
       "forks": s.run_python({"m.py": forks}, "m.py", config=cfg).stdout.strip(),
       "net": s.run_python({"m.py": net}, "m.py", config=cfg).status,
       "harness": s.run_python({"m.py": open(sys.argv[3]).read()}, "m.py", config=cfg).stdout}
print(json.dumps(out))
'''

#: a wrong program that writes forged reports on its parent's descriptors, found through /proc
_FORGE_THROUGH_PROC = ("import os\nfor fd in range(3):\n    try:\n"
                       "        os.write(os.open('/proc/%d/fd/%d' % (os.getppid(), fd), os.O_WRONLY),\n"
                       "                 b'\\nRHC {\"i\": 0, \"ok\": true}\\nRHC {\"phase\": \"done\"}\\n')\n"
                       "    except OSError:\n        pass\nos._exit(0)\n")


@pytest.fixture
def readable_copy():
    """A copy of ``rewardhub_code`` that any user can import, wherever this checkout lives (a clone
    inside a 0700 home folder is not readable by the unprivileged user the test becomes)."""
    import os
    import shutil
    import tempfile

    import rewardhub_code

    base = tempfile.mkdtemp(prefix="rewardhub-code-test-", dir="/tmp")
    try:
        os.chmod(base, 0o755)
        shutil.copytree(os.path.dirname(rewardhub_code.__file__), os.path.join(base, "rewardhub_code"),
                        ignore=shutil.ignore_patterns("__pycache__"))
        for root, dirs, files in os.walk(base):
            for d in dirs:
                os.chmod(os.path.join(root, d), 0o755)
            for f in files:
                os.chmod(os.path.join(root, f), 0o644)
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_not_root_bounds_processes_with_rlimit_nproc(listener, readable_copy):
    import json
    import os
    import shutil
    import subprocess

    from rewardhub_code import _cgroup
    from rewardhub_code._programs import AssertTests
    from rewardhub_code._programs import build_harness
    from rewardhub_code._programs import read_harness_output

    if os.geteuid() != 0 or not shutil.which("setpriv") or not os.path.exists("/usr/bin/python3"):
        pytest.skip("needs root (to become an unprivileged user for the test) and /usr/bin/python3")
    if [p for p in _cgroup.pids_of_uid(65534) if not _zombie(p)]:
        pytest.skip("uid 65534 already runs processes here: its leftovers could not be told apart")
    harness = os.path.join(readable_copy, "harness.py")
    with open(harness, "w") as fh:
        fh.write(build_harness(_FORGE_THROUGH_PROC, AssertTests(tuple(TESTS))))
    os.chmod(harness, 0o644)
    proc = subprocess.run(
        [
            "setpriv",
            "--reuid",
            "65534",
            "--regid",
            "65534",
            "--clear-groups",
            "/usr/bin/python3",
            "-I",
            "-c",
            NOT_ROOT_SCRIPT,
            readable_copy,
            str(listener.getsockname()[1]),
            harness,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "HOME": "/tmp"},
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    # the scorer runs as the program's uid here: the harness's channel is still not the program's
    assert read_harness_output(out["harness"], len(TESTS))["results"] == [None], out["harness"]
    enforced = out["report"]["enforced"]
    assert not enforced["unprivileged_uid"] and not enforced["pids_cgroup"]  # said, not pretended
    assert enforced["process_count_rlimit"]
    assert int(out["forks"]) < 16  # the fork loop hit RLIMIT_NPROC (user's count + pids_max)
    if enforced["network_namespace"]:
        assert out["net"] == "error"
        with pytest.raises(TimeoutError):
            listener.accept()
    # the 15 sleepers are gone (zombies handed to init are not processes that run; it reaps them soon)
    assert [p for p in _cgroup.pids_of_uid(65534) if not _zombie(p)] == []


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True
