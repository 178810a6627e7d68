"""A seccomp filter that takes the kernel keyrings away from sandboxed programs.

The kernel keyrings are state that outlives a process: a key added to the user keyring (``@u``)
or the user-session keyring (``@us``) of the pool's uid by one program would be read by the next
program run as that uid, and namespaces do not separate them for a uid that is not in a user
namespace of its own. The filter makes ``add_key``, ``request_key`` and ``keyctl`` fail with
``ENOSYS`` (as on a kernel built without keys), and refuses every system call of another ABI
(32-bit ``int 0x80`` and x32 on x86_64), which could otherwise reach the same calls by other numbers.

:func:`keyring_filter` returns the classic-BPF program as bytes: bubblewrap loads it from a file
descriptor (``--seccomp FD``), the native launcher with ``prctl(PR_SET_SECCOMP)``.
This module deliberately does not import ``rewardhub``.
"""

from __future__ import annotations

import platform
import struct

__all__ = ["keyring_filter"]

_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
#: add_key, request_key, keyctl
_KEY_CALLS = {"x86_64": (248, 249, 250), "aarch64": (217, 218, 219)}
_X32_BIT = 0x40000000
_ENOSYS = 38

_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_RET_K = 0x06
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k)


def keyring_filter(machine: str | None = None) -> bytes | None:
    """The filter for this machine (``struct sock_filter`` array), or ``None`` where no system call
    numbers are known for it (then the keyrings are not blocked, and the isolation report says so)."""
    machine = machine or platform.machine()
    arch = _AUDIT_ARCH.get(machine)
    if arch is None:
        return None
    calls = _KEY_CALLS[machine]
    body: list[tuple[int, int, int, int]] = []
    x32 = machine == "x86_64"
    n_checks = len(calls) + (1 if x32 else 0)
    deny = 3 + n_checks + 1  # ld arch, jeq arch, ld nr, checks..., ret allow, ret deny
    body.append((_LD_W_ABS, 0, 0, 4))                       # A = seccomp_data.arch
    body.append((_JEQ_K, 0, deny - 2, arch))                # another ABI: deny
    body.append((_LD_W_ABS, 0, 0, 0))                       # A = seccomp_data.nr
    if x32:
        body.append((_JGE_K, deny - 4, 0, _X32_BIT))
    for nr in calls:
        here = len(body)
        body.append((_JEQ_K, deny - here - 1, 0, nr))
    body.append((_RET_K, 0, 0, _RET_ALLOW))
    body.append((_RET_K, 0, 0, _RET_ERRNO | _ENOSYS))
    assert len(body) == deny + 1
    return b"".join(_insn(*i) for i in body)
