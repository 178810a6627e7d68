"""Rewards for the whole-group tests (a module the CLI, the server and the workers import)."""

from __future__ import annotations

import os
import time


def group_size(*, prompts, responses, **kwargs):
    """Group reward: every row gets its group's size (a group cut in pieces shows as a smaller number);
    1000 more when the group holds more than one prompt (a group graded against another row's prompt)."""
    mixed = any(p != prompts[0] for p in prompts)
    return [float(len(responses)) + (1000.0 if mixed else 0.0)] * len(responses)


def length(*, response, **kwargs):
    """The length of the response."""
    return float(len(response))


def logged(*, response, extra_info=None, **kwargs):
    """The length of ``response``; each call appends ``response`` to ``extra_info['log']`` first, and
    waits for the file ``extra_info['gate']`` when one is named (and not yet there)."""
    info = extra_info or {}
    with open(info["log"], "a") as f:
        f.write(response + "\n")
    gate = info.get("gate")
    while gate and not os.path.exists(gate):
        time.sleep(0.01)
    if response.startswith("raise"):
        raise RuntimeError(f"failed on {response}")
    return float(len(response))


def held(*, response, extra_info=None, **kwargs):
    """The length of ``response``, each call logged to ``extra_info['log']``; a response that starts
    with ``wait`` waits for the file ``extra_info['gate']`` after it is logged."""
    info = extra_info or {}
    with open(info["log"], "a") as f:
        f.write(response + "\n")
    while response.startswith("wait") and not os.path.exists(info["gate"]):
        time.sleep(0.01)
    return float(len(response))


#: stopper's calls so far, and what it calls once it has made STOP_AT of them (set by a test)
CALLS: list[str] = []
STOP_AT: int = -1
STOP_HOOK = None


def stopper(*, response, **kwargs):
    """The length of ``response``; the STOP_AT-th call runs STOP_HOOK (a test's interruption)."""
    CALLS.append(response)
    if len(CALLS) == STOP_AT and STOP_HOOK is not None:
        STOP_HOOK()
    return float(len(response))
