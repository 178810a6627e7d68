"""State that could cross from one sample to the next: none may.

Each case runs a program that leaves something behind (a key in the uid's keyrings, a file in
/tmp or /dev/shm, a System V segment, a POSIX message queue) and then, as the same uid (a pool of
one slot), a second program that looks for it; or holds something (an abstract unix socket) while
a concurrent run looks for it. Each program prints ``MADE`` / ``FOUND`` / ``ABSENT``.
"""

from __future__ import annotations

import dataclasses
import secrets
import threading

import pytest
from rewardhub_code import sandbox

ENFORCED = sandbox.isolation_report()["enforced"]
#: one slot (the last of the default pool, so that the leftovers check covers it): both runs share a uid
ONE_UID = sandbox.SandboxLimits(
    uids=range(sandbox.SandboxLimits().uids[-1], sandbox.SandboxLimits().uids[-1] + 1)
)

_LIBC = "import ctypes, sys\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.syscall.restype = ctypes.c_long\n"

_KEYRING = _LIBC + """
NAME = sys.argv[2].encode()
RINGS = (-4, -5, -3, -2)  # user, user-session, session, process keyrings
if sys.argv[1] == "make":
    made = [libc.syscall(248, b"user", NAME, b"s3cret", 6, ring) > 0 for ring in RINGS]  # add_key
    print("MADE" if any(made) else "REFUSED", ctypes.get_errno())
else:
    found = [libc.syscall(250, 10, ring, b"user", NAME, 0) > 0 for ring in RINGS]  # KEYCTL_SEARCH
    print("FOUND" if any(found) else "ABSENT")
"""

_FILES = """
import os, sys
paths = ["/tmp/" + sys.argv[2], "/dev/shm/" + sys.argv[2], "/var/tmp/" + sys.argv[2]]
if sys.argv[1] == "make":
    made = []
    for p in paths:
        try:
            open(p, "w").write("x")
            made.append(p)
        except OSError:
            pass
    print("MADE" if made else "REFUSED")
else:
    print("FOUND" if any(os.path.exists(p) for p in paths) else "ABSENT")
"""

_SYSV = _LIBC + """
key = int(sys.argv[2][3:10], 16)
if sys.argv[1] == "make":
    ok = libc.shmget(key, 4096, 0o1000 | 0o666) >= 0 and libc.msgget(key, 0o1000 | 0o666) >= 0  # IPC_CREAT
    print("MADE" if ok else "REFUSED", ctypes.get_errno())
else:
    print("FOUND" if libc.shmget(key, 0, 0) >= 0 or libc.msgget(key, 0) >= 0 else "ABSENT")
"""

_MQUEUE = _LIBC + """
import os
try:
    mq_open = libc.mq_open
except AttributeError:
    mq_open = ctypes.CDLL("librt.so.1", use_errno=True).mq_open
name = ("/" + sys.argv[2]).encode()
if sys.argv[1] == "make":
    made = mq_open(name, os.O_CREAT | os.O_RDWR, 0o666, None) >= 0
    print("MADE" if made else "REFUSED", ctypes.get_errno())
else:
    print("FOUND" if mq_open(name, os.O_RDWR) >= 0 else "ABSENT")
"""


def _run(program: str, *args: str, config: sandbox.SandboxLimits = ONE_UID) -> str:
    res = sandbox.run_python({"m.py": program}, "m.py", args=args, config=config)
    assert res.status == "ok", res.stderr
    return res.stdout.split()[0]


@pytest.mark.parametrize(
    "mode",
    [{}, {"use_bwrap": False}, {"use_namespaces": False, "python": "/usr/bin/python3"}],
    ids=["default", "native", "plain"],
)
def test_a_key_added_by_one_program_is_not_read_by_the_next(mode):
    config = dataclasses.replace(ONE_UID, **mode)
    name = "rhc-key-" + secrets.token_hex(8)
    _run(_KEYRING, "make", name, config=config)  # refused (ENOSYS) where the filter holds
    assert _run(_KEYRING, "look", name, config=config) == "ABSENT"
    assert sandbox.isolation_report(config)["enforced"]["kernel_keyrings_blocked"]  # and the report says so


@pytest.mark.parametrize(
    ("program", "needs"),
    [(_FILES, "private_tmp"), (_SYSV, "ipc_uts_namespaces"), (_MQUEUE, "ipc_uts_namespaces")],
    ids=["tmp_files", "sysv", "mqueue"],
)
def test_what_one_program_leaves_behind_is_not_seen_by_the_next(program, needs):
    if not ENFORCED[needs]:
        pytest.skip(f"{needs} is not enforced on this machine (see isolation_report)")
    name = "rhc" + secrets.token_hex(8)
    assert _run(program, "make", name) == "MADE"
    assert _run(program, "look", name) == "ABSENT"


def test_an_abstract_socket_is_not_reachable_from_a_concurrent_run():
    if not ENFORCED["network_namespace"]:
        pytest.skip("no network namespace on this machine: abstract sockets are shared")
    name = "rhc-sock-" + secrets.token_hex(8)
    server = (
        "import socket, sys, time\ns = socket.socket(socket.AF_UNIX)\ns.bind('\\0' + sys.argv[1])\n"
        "s.listen(1)\nprint('MADE', flush=True)\ns.settimeout(3)\ntry:\n    s.accept()\n    "
        "print('REACHED')\n"
        "except OSError:\n    print('ALONE')\n"
    )
    client = ("import socket, sys, time\nfor _ in range(20):\n    try:\n"
              "        socket.socket(socket.AF_UNIX).connect('\\0' + sys.argv[1])\n        print('FOUND')\n"
              "        break\n    except OSError:\n        time.sleep(0.1)\nelse:\n    print('ABSENT')\n")
    got: dict[str, str] = {}

    def serve() -> None:
        res = sandbox.run_python(
            {"m.py": server}, "m.py", args=(name,), config=sandbox.SandboxLimits(timeout_s=10)
        )
        got["server"] = res.stdout

    t = threading.Thread(target=serve)
    t.start()
    try:
        assert _run(client, name, config=sandbox.SandboxLimits(timeout_s=10)) == "ABSENT"
    finally:
        t.join(30)
    assert got["server"].split() == ["MADE", "ALONE"]
