"""A reward for the ``reward.remote`` tests that counts its calls (a module the server's workers import)."""

from __future__ import annotations

import os
import time


def counted(*, response, extra_info=None, **kwargs):
    """The length of ``response``; each call appends ``response`` as a line to ``extra_info['log']``,
    once the file ``extra_info['gate']`` exists (when one is named)."""
    info = extra_info or {}
    gate = info.get("gate")
    while gate and not os.path.exists(gate):
        time.sleep(0.01)
    with open(info["log"], "a") as f:
        f.write(response + "\n")
    return float(len(response))
