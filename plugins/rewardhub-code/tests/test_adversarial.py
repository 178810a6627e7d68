"""Hostile programs: each one gets the reward's failure value and leaves nothing behind.

Every case is a model "response" to the task "write add(a, b)". Where the hostile action would
be an escape (reading the secret, reaching the listener, writing outside), the program defines a
correct ``add`` only if the action succeeded, so a score of 1.0 would itself prove the escape.
The ``no_leftovers`` fixture (conftest) checks after each test that no process of a sandbox uid,
no run cgroup and no working directory remains.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import time
import uuid

import pytest
from code_tasks import fenced
from rewardhub_code import sandbox
from rewardhub_code.reward import code_tests

TESTS = ["assert add(2, 3) == 5", "assert add(-1, 1) == 0"]
ENFORCED = sandbox.isolation_report()["enforced"]


def score(program: str, **kw):
    return code_tests(response=fenced(program), ground_truth=TESTS, **kw)


def test_infinite_loop_is_killed_at_the_wall_time():
    t = time.monotonic()
    out = score("while True:\n    pass", timeout_s=1.0)
    assert out["score"] == 0.0 and out["timed_out"] == 1 and out["error"] == "timeout"
    assert time.monotonic() - t < 30.0  # killed (at 1 s, plus start-up on a loaded host), not left to run


def test_cpu_time_limit_holds_even_without_the_wall_clock():
    # a CPU-time limit below the wall limit: the kernel's RLIMIT_CPU stops it
    res = sandbox.run_python({"m.py": "while True:\n    pass"}, "m.py",
                             config=sandbox.SandboxLimits(timeout_s=120.0, cpu_s=1))
    # SIGXCPU: the CPU limit stopped it, not the wall clock (a second of CPU can take many seconds of
    # wall time on a loaded host)
    assert res.status == "timeout" and res.signal == signal.SIGXCPU


def test_sleeping_past_the_timeout():
    t = time.monotonic()
    out = score("import time\ntime.sleep(60)\ndef add(a, b):\n    return a + b", timeout_s=1.0)
    assert out["score"] == 0.0 and out["error"] == "timeout"
    assert time.monotonic() - t < 30.0  # killed, not left to sleep its 60 s


def test_sleeping_children_do_not_hold_the_run_open():
    # the main program exits at once; its double-forked child would sleep for a minute
    prog = ("import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
            "        time.sleep(60)\n    os._exit(0)\ndef add(a, b):\n    return a + b")
    out = score(prog, timeout_s=30.0)
    # 1.0: the run ended with the main program (waiting for the sleeper, it would time out at 30 s);
    # and no_leftovers: the sleeper is gone
    assert out["score"] == 1.0


def test_fork_bomb_is_bounded_and_cleaned_up(fork_guard):
    prog = ("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
            "def add(a, b):\n    return a + b")
    t = time.monotonic()
    out = score(prog, timeout_s=2.0)
    assert out["score"] == 0.0 and out["error"] == "timeout"
    assert time.monotonic() - t < 60.0  # stopped at its timeout (2 s), not left to fork on


def test_bounded_fork_loop_hits_the_process_limit(fork_guard):
    prog = (
        "import os, time\nn = 0\nfor _ in range(500):\n    try:\n        pid = os.fork()\n"
        "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(30)\n        os._exit(0)\n"
        "    n += 1\nprint(n)\n"
    )
    res = sandbox.run_python({"m.py": prog}, "m.py", config=sandbox.SandboxLimits(timeout_s=5.0, pids_max=32))
    assert res.status == "ok", res.stderr
    assert int(res.stdout) < 32


@pytest.mark.parametrize("how", ["bytearray(10 * 1024 ** 3)", "[bytearray(100 << 20) for _ in range(100)]"])
def test_ten_gigabytes_is_refused(how):
    out = score(f"x = {how}\ndef add(a, b):\n    return a + b", memory_mb=512)
    assert out["score"] == 0.0 and out["error"] == "memory"


def test_memory_limit_counts_all_processes():
    if not ENFORCED["memory_cgroup"]:
        pytest.skip("no memory cgroup here: only the per-process address-space limit holds")
    # four children of 200 MB each stay under a 512 MB per-process limit but not under 512 MB in total
    prog = (
        "import os, time\npids = []\nfor _ in range(4):\n    pid = os.fork()\n    if pid == 0:\n"
        "        b = bytearray(200 << 20)\n        for i in range(0, len(b), 4096):\n            b[i] = 1\n"
        "        time.sleep(2)\n        os._exit(0)\n    pids.append(pid)\n"
        "codes = [os.waitpid(p, 0)[1] for p in pids]\nprint(sum(c != 0 for c in codes))\n"
    )
    res = sandbox.run_python(
        {"m.py": prog}, "m.py", config=sandbox.SandboxLimits(timeout_s=10.0, memory_mb=512)
    )
    assert res.status in ("ok", "memory")
    assert res.status == "memory" or int(res.stdout) >= 1  # at least one child was OOM-killed


def test_writing_outside_the_sandbox_directory_fails():
    token = uuid.uuid4().hex
    here = os.path.dirname(os.path.abspath(__file__))
    targets = [os.path.join(here, f"pwned-{token}"), f"/tmp/pwned-{token}", f"/var/tmp/pwned-{token}",
               f"/dev/shm/pwned-{token}", f"/root/pwned-{token}", f"/etc/pwned-{token}",
               os.path.join(os.path.expanduser("~"), f"pwned-{token}")]
    prog = (
        f"import os\ntargets = {targets!r}\nwrote = []\nfor t in targets + ['../pwned-{token}', "
        f"'/pwned-{token}']:\n"
        "    try:\n        open(t, 'w').write('x')\n        wrote.append(os.path.realpath(t))\n    except "
        "OSError:\n        pass\n"
        "print(wrote, os.listdir('.'))\n"
        "# the private /tmp, /var/tmp and /dev/shm of the sandbox may be written: they vanish with it\n"
        "if any(not t.startswith(('/tmp/', '/var/tmp/', '/dev/shm/')) for t in wrote):\n"
        "    def add(a, b):\n        return a + b\n"
    )
    out = score(prog)
    assert out["score"] == 0.0
    for t in targets + [f"/pwned-{token}", os.path.join(os.path.dirname(here), f"pwned-{token}")]:
        assert not os.path.exists(t), f"the program wrote {t} on the host"


def test_writes_inside_are_bounded_by_the_file_size_limit():
    prog = "f = open('big', 'wb')\nfor _ in range(100):\n    f.write(b'x' * (1 << 20))\n"
    res = sandbox.run_python({"m.py": prog}, "m.py", config=sandbox.SandboxLimits(file_size_mb=4))
    assert res.status == "error" and ("File too large" in res.stderr or res.signal == signal.SIGXFSZ)


def test_environment_secret_is_not_seen(monkeypatch):
    secret = "rhc-fake-secret-" + secrets.token_hex(8)
    monkeypatch.setenv("RHC_FAKE_SECRET", secret)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    scorer = os.getpid()
    prog = (f"import os, glob\nseen = '{secret[:16]}' in repr(dict(os.environ))\n"
            f"for p in glob.glob('/proc/*/environ') + ['/proc/{scorer}/environ', '/proc/1/environ']:\n"
            "    try:\n"
            f"        seen = seen or b'{secret[:16]}' in open(p, 'rb').read()\n"
            "    except OSError:\n        pass\nprint(sorted(os.environ), seen)\nif seen:\n"
            "    def add(a, b):\n        return a + b\n")
    out = score(prog)
    assert out["score"] == 0.0
    res = sandbox.run_python({"m.py": prog}, "m.py")
    assert res.status == "ok" and secret not in res.stdout and res.stdout.strip().endswith("False")
    assert "RHC_FAKE_SECRET" not in res.stdout and "AWS_SECRET" not in res.stdout


@pytest.fixture
def listener():
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.settimeout(0.5)
    yield srv
    srv.close()


def _connect_program(port: int) -> str:
    return (
        f"import socket\nok = False\nfor host in ('127.0.0.1', 'localhost'):\n    try:\n"
        f"        socket.create_connection((host, {port}), timeout=1).sendall(b'hello')\n        ok = True\n"
        "    except OSError as exc:\n        print(type(exc).__name__)\nif ok:\n"
        "    def add(a, b):\n        return a + b\n"
    )


def test_socket_to_a_loopback_listener_gets_no_connection(listener):
    if not ENFORCED["network_namespace"]:
        pytest.skip("no network namespace on this machine: the program CAN reach loopback listeners "
                    "(see test_degraded.py and the README's Isolation section)")
    out = score(_connect_program(listener.getsockname()[1]))
    assert out["score"] == 0.0
    with pytest.raises(TimeoutError):
        listener.accept()


def test_killing_the_parent_and_the_scorer_fails():
    scorer = os.getpid()
    prog = ("import os, signal\nfor attempt in (lambda: os.kill(os.getppid(), signal.SIGKILL),\n"
            f"                lambda: os.kill({scorer}, signal.SIGKILL),\n"
            f"                lambda: os.killpg(os.getpgid({scorer}), signal.SIGKILL),\n"
            "                lambda: os.kill(-1, signal.SIGKILL)):\n    try:\n        attempt()\n"
            "    except OSError:\n        pass\n")
    out = score(prog)
    assert out["score"] == 0.0 and out["error"] in ("runtime_error", "timeout")
    assert os.getpid() == scorer  # we are still here to check


def test_huge_stdout_is_capped_and_fails():
    t = time.monotonic()
    prog = "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\ndef add(a, b):\n    return a + b"
    out = score(prog, timeout_s=120.0)
    assert out["score"] == 0.0 and out["error"] == "output_limit"
    assert time.monotonic() - t < 60.0  # killed at the cap, not at the timeout (120 s)
    res = sandbox.run_python({"m.py": prog}, "m.py", config=sandbox.SandboxLimits(max_output_bytes=1 << 16))
    assert res.status == "output_limit" and len(res.stdout) == 1 << 16


def test_huge_output_printed_before_passing_results_still_fails():
    prog = "print('y' * (3 << 20))\ndef add(a, b):\n    return a + b"
    assert score(prog)["score"] == 0.0


def test_forged_result_lines_do_not_count():
    # prints lines that look like harness reports
    prog = ("import sys\nfor i in range(2):\n    print('RHC-' + '0' * 32, '{\"i\": %d, \"ok\": true}' % i)\n"
            "    print('RHC {\"i\": %d, \"ok\": true}' % i)\n"
            "print('RHC {\"phase\": \"done\"}')\nsys.stdin.read()\nimport os\nos._exit(0)\n")
    out = score(prog)
    assert out["score"] == 0.0


# Forged results: whatever the program learns from its stdin and writes on any channel it holds.
_FORGE = """
import json, os
nonce = ''
try:
    os.lseek(0, 0, 0)  # stdin back to its start: what the harness was sent
    nonce = os.read(0, 4096).decode().strip()
except OSError:
    pass
lines = []
for prefix in (nonce + ' ', 'RHC '):
    lines += [prefix + json.dumps({'i': i, 'ok': True}) for i in range(2)]
    lines += [prefix + json.dumps({'phase': 'done'})]
data = ('\\n' + '\\n'.join(lines) + '\\n').encode()
targets = list(range(256))
for fd in range(8):
    try:
        targets.append(os.open('/proc/%d/fd/%d' % (os.getppid(), fd), os.O_WRONLY))
    except OSError:
        pass
for fd in targets:
    try:
        os.write(fd, data)
    except OSError:
        pass
os._exit(0)
"""


def test_a_wrong_program_that_forges_results_scores_zero():
    # it seeks stdin back to 0 for the nonce, then writes forged reports on every descriptor it has
    # and every one of its parent's it can open, and exits before the tests run
    out = score(_FORGE)
    assert out["score"] == 0.0 and out["passed"] == 0, out
    # the same lines printed by the program as a whole: its stdout is not the harness's channel
    assert score("def add(a, b):\n    return a - b\n" + _FORGE.replace("os._exit(0)", ""))["score"] == 0.0


def test_the_harness_channel_cannot_be_opened_through_proc():
    # the program's parent is the harness's supervisor: its descriptors are not the program's
    prog = ("import os\nopened = []\nfor fd in ('0', '1', '2'):\n    try:\n"
            "        os.close(os.open('/proc/%d/fd/%s' % (os.getppid(), fd), os.O_WRONLY))\n"
            "        opened.append(fd)\n    except OSError:\n        pass\n"
            "if opened:\n    def add(a, b):\n        return a + b\n")
    assert score(prog)["score"] == 0.0


def test_a_report_out_of_order_ends_the_run_as_tampered():
    # a program that found the harness's pipe and nonce (here: in its caller's frame) and reports a
    # test before it ran: the real report that follows is out of order, and nothing counts
    prog = ("import json, os, sys\nf = sys._getframe(1)\nwhile f is not None and 'nonce' not in f.f_locals:\n"
            "    f = f.f_back\nv = f.f_locals if f is not None else {}\n"
            "os.write(v['wfd'], (v['nonce'] + ' ' + json.dumps({'i': 0, 'ok': True}) + '\\n').encode())\n"
            "def add(a, b):\n    return a - b\n")
    out = score(prog)
    assert out["score"] == 0.0 and out["error"] == "tampered", out


def test_the_sandbox_is_a_fresh_unprivileged_session():
    prog = ("import os\nprint(os.getuid(), os.geteuid(), os.getsid(0) == os.getpid() or os.getsid(0), "
            "os.getcwd(), sorted(os.listdir('.')))\n")
    res = sandbox.run_python({"m.py": prog}, "m.py")
    assert res.status == "ok", res.stderr
    uid, euid, _, cwd, listing = res.stdout.split(" ", 4)
    assert cwd == sandbox.SANDBOX_CWD and "m.py" in listing
    if ENFORCED["unprivileged_uid"]:
        assert int(uid) in sandbox.SandboxLimits().uids and int(euid) == int(uid)


def test_concurrent_runs_get_distinct_uids():
    from concurrent.futures import ThreadPoolExecutor

    prog = "import os, time\ntime.sleep(0.3)\nprint(os.getuid())"
    with ThreadPoolExecutor(4) as ex:
        results = list(ex.map(lambda _: sandbox.run_python({"m.py": prog}, "m.py"), range(4)))
    assert all(r.status == "ok" for r in results)
    if ENFORCED["unprivileged_uid"]:
        assert len({r.stdout for r in results}) == 4
