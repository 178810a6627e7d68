"""The keeper of one vLLM server process inside a served-model replica (``python -m`` this module).

``python -m rewardhub.builtin._served_child PARENT_PID -- CMD...`` runs CMD (``vllm serve``'s API server) in
this process's group and watches both sides each half second: when CMD exits, this stops the rest of
its group and exits (the replica sees it and dies, so Ray Serve starts another); when the replica that
started it is gone (killed, crashed, shut down), it stops the whole group, so no vLLM server outlives its
replica.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time


def _stop_group(sig: int = signal.SIGTERM, wait_s: float = 10.0,
                child: subprocess.Popen[bytes] | None = None) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # this process is in the group it signals
    try:
        os.killpg(os.getpgrp(), sig)
    except ProcessLookupError:
        pass
    if child is not None:
        try:
            child.wait(wait_s)
        except subprocess.TimeoutExpired:
            pass
    os.killpg(os.getpgrp(), signal.SIGKILL)  # the rest of the group (vLLM's engine core), this one too


def main(argv: list[str]) -> int:
    parent = int(argv[0])
    cmd = argv[argv.index("--") + 1:]
    child = subprocess.Popen(cmd)
    signal.signal(signal.SIGTERM, lambda *_: _stop_group(child=child))
    while True:
        code = child.poll()
        if code is not None:
            _stop_group(wait_s=2.0, child=child)
            return code
        if os.getppid() != parent:  # the replica is gone: this process was handed to init
            _stop_group(child=child)
        time.sleep(0.5)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
