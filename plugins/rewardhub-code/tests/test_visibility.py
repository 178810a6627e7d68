"""Under bubblewrap a program sees the Python runtime and nothing else: no host socket outside
/tmp, no file readable by others outside the runtime; and isolation_report() says so.

As in test_adversarial.py, a program defines a correct ``add`` only when its attack worked, so a
score of 1.0 would itself prove the escape.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile

import pytest
from code_tasks import fenced
from rewardhub_code import sandbox
from rewardhub_code.reward import code_tests

TESTS = ["assert add(2, 3) == 5"]
# native mode warns once that it has no PID namespace (test_degraded.py checks that warning)
pytestmark = pytest.mark.filterwarnings(
    "ignore:rewardhub-code local sandbox \\(native mode\\):rewardhub.RewardhubWarning"
)
REPORT = sandbox.isolation_report()
runtime_only = pytest.mark.skipif(not REPORT["visible"]["runtime_only"],
                                  reason="no bubblewrap here: the program sees the host filesystem "
                                         "(isolation_report says so; see test_report_without_bubblewrap)")


def _host_folder():
    """A fresh folder outside /tmp, searchable by everyone (as /run, /srv or a data folder are)."""
    for base in ("/run", "/srv", "/opt", "/var/lib", os.path.expanduser("~")):
        if os.path.isdir(base) and os.access(base, os.W_OK):
            d = tempfile.mkdtemp(prefix="rhc-visibility-", dir=base)
            os.chmod(d, 0o755)
            return d
    pytest.skip("no writable folder outside /tmp")


@pytest.fixture(params=["default", "native"])
def local(request):
    """The sandbox as configured (bubblewrap here when installed), and the launcher's own namespaces."""
    opts = {} if request.param == "default" else {"use_bwrap": False}
    if not sandbox.isolation_report(sandbox.SandboxLimits(**opts))["visible"]["runtime_only"]:
        pytest.skip(f"{request.param}: the program sees the host filesystem here (isolation_report says so)")
    return opts


@pytest.fixture
def host_folder():
    d = _host_folder()
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_world_writable_unix_socket_outside_tmp_is_unreachable(host_folder, local):
    path = os.path.join(host_folder, "bus.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        srv.bind(path)
        os.chmod(path, 0o777)  # like the system D-Bus socket: anyone may connect
        srv.listen(4)
        srv.settimeout(0.5)
        prog = (f"import socket\ns = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect({path!r})\n"
                "    s.sendall(b'hello')\n    def add(a, b):\n        return a + b\n"
                "except OSError as exc:\n    print(type(exc).__name__, exc)\n")
        out = code_tests(response=fenced(prog), ground_truth=TESTS, local=local)
        assert out["score"] == 0.0
        with pytest.raises(TimeoutError):
            srv.accept()
        res = sandbox.run_python({"m.py": prog}, "m.py", config=sandbox.SandboxLimits(**local))
        assert res.status == "ok" and "FileNotFoundError" in res.stdout
    finally:
        srv.close()


def test_file_readable_by_others_outside_the_runtime_is_unreadable(host_folder, local):
    answers = os.path.join(host_folder, "answers.txt")
    with open(answers, "w") as f:
        f.write("add = lambda a, b: a + b\n")
    os.chmod(answers, 0o644)
    prog = (
        f"try:\n    exec(open({answers!r}).read())\nexcept OSError as exc:\n    print(type(exc).__name__)\n"
    )
    out = code_tests(response=fenced(prog), ground_truth=TESTS, local=local)
    assert out["score"] == 0.0
    res = sandbox.run_python({"m.py": prog}, "m.py", config=sandbox.SandboxLimits(**local))
    assert res.status == "ok" and res.stdout.strip() == "FileNotFoundError"


def test_the_program_sees_only_the_runtime(local):
    prog = (
        "import os, sys, json\nprint(json.dumps({'root': sorted(os.listdir('/')),"
        " 'dev': sorted(os.listdir('/dev')), 'here': sorted(os.listdir('.')),"
        " 'home': os.path.exists(os.path.expanduser('~root')) and os.listdir(os.path.expanduser('~root')),"
        " 'python': sys.version_info[:2]}))\n"
    )
    res = sandbox.run_python({"m.py": prog}, "m.py", config=sandbox.SandboxLimits(**local))
    assert res.status == "ok", res.stderr
    seen = json.loads(res.stdout)
    allowed = {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "tmp", "dev", "proc"}
    prefix_top = sandbox._interpreter(sandbox.SandboxLimits())[1].strip("/").split("/")[0]
    assert set(seen["root"]) <= allowed | {prefix_top}
    assert "run" not in seen["root"] and "home" not in seen["root"] and "var" not in seen["root"]
    assert set(seen["dev"]) <= {"null", "zero", "full", "random", "urandom", "tty", "console", "pts", "ptmx",
                                "shm", "fd", "stdin", "stdout", "stderr", "core", "mqueue"}
    assert seen["here"] == ["m.py"]


@runtime_only
def test_etc_shows_only_what_the_loader_needs():
    prog = "import os\nprint(sorted(os.listdir('/etc')))\n"
    res = sandbox.run_python({"m.py": prog}, "m.py")
    assert res.status == "ok", res.stderr
    assert set(eval(res.stdout)) <= {"ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime"}


@runtime_only
def test_visible_paths_adds_a_folder_read_only(host_folder):
    with open(os.path.join(host_folder, "helper.py"), "w") as f:
        f.write("def add(a, b):\n    return a + b\n")
    os.chmod(os.path.join(host_folder, "helper.py"), 0o644)
    prog = (
        f"import sys\nsys.path.insert(0, {host_folder!r})\nfrom helper import add\nprint(add(2, 3))\n"
        f"try:\n    open({host_folder!r} + '/w', 'w')\nexcept OSError as exc:\n    "
        "print(type(exc).__name__)\n"
    )
    cfg = sandbox.SandboxLimits(visible_paths=(host_folder,))
    res = sandbox.run_python({"m.py": prog}, "m.py", config=cfg)
    assert res.status == "ok", res.stderr
    assert res.stdout.split() == ["5", "OSError"]
    assert not os.path.exists(os.path.join(host_folder, "w"))
    assert host_folder in sandbox.isolation_report(cfg)["visible"]["read_only"]


def test_isolation_report_states_what_is_visible():
    visible = REPORT["visible"]
    assert set(visible) >= {"runtime_only", "read_only", "private", "dev", "proc"}
    assert REPORT["enforced"]["runtime_only_filesystem"] is visible["runtime_only"]
    if visible["runtime_only"]:
        assert visible["private"][:2] == ["/tmp", "/dev/shm"]
        assert any(p == "/usr" or p.startswith("/usr ") for p in visible["read_only"])
        assert not any(p.startswith(("/run", "/home", "/var", "/srv", "/work")) for p in visible["read_only"])
    else:
        assert any("files readable by 'other'" in n for n in REPORT["notes"])


def test_report_without_any_namespace():
    report = sandbox.isolation_report(sandbox.SandboxLimits(use_bwrap=False, use_namespaces=False))
    assert report["visible"]["runtime_only"] is False and report["mode"] == "plain"
    assert not report["enforced"]["runtime_only_filesystem"]
    assert any("world-writable unix sockets outside /tmp" in n for n in report["notes"])
