"""Misbehaving and well-behaved rewards used by the execution tests (a module the workers import)."""

from __future__ import annotations

import asyncio
import math
import os
import signal
import subprocess
import time


def misbehave(*, response, extra_info=None, **kwargs):
    """Good for 'ok:<x>' responses; otherwise does what the response says."""
    if response.startswith("ok:"):
        return float(response[3:])
    if response == "hang":
        pidfile = (extra_info or {}).get("pidfile")
        if pidfile:
            child = subprocess.Popen(["sleep", "1000"])
            with open(pidfile, "w") as f:
                f.write(f"{os.getpid()} {child.pid}")
        while True:
            time.sleep(1)
    if response == "raise":
        raise RuntimeError("boom")
    if response == "says timed out":  # a failure whose text says "timed out": an error, not a timeout
        raise OSError("the call to the judge timed out")
    if response == "nan":
        return math.nan
    if response == "inf":
        return math.inf
    if response == "string":
        return "0.5"
    if response == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if response == "exit":
        os._exit(3)
    if response == "none":
        return None
    if response == "dict":
        return {"score": 0.25, "length": len(response)}
    if response == "baddict":
        return {"value": 1}
    raise ValueError(f"unexpected {response!r}")


_attempts: dict[str, int] = {}


def flaky(*, response, extra_info=None, **kwargs):
    """Fails the first time per response (per process, shared through a file), then succeeds."""
    path = (extra_info or {})["counter"]
    with open(path, "a+") as f:
        f.seek(0)
        n = len(f.read())
        f.write("x")
    if n == 0:
        raise RuntimeError("first try fails")
    return 1.0


async def async_len(*, response, **kwargs):
    """Async reward: sleeps a little, then scores the length."""
    await asyncio.sleep(0.05)
    if response == "hang":
        await asyncio.sleep(3600)
    return float(len(response))


#: calls of async_overlap in flight now, and the most there were at once (read by the tests, in-process)
in_flight = {"now": 0, "peak": 0}


async def async_overlap(*, response, **kwargs):
    """Async reward that counts how many of its calls are in flight at once (``in_flight``)."""
    in_flight["now"] += 1
    in_flight["peak"] = max(in_flight["peak"], in_flight["now"])
    try:
        await asyncio.sleep(0.05)
    finally:
        in_flight["now"] -= 1
    return 1.0


class AsyncCallable:
    async def __call__(self, *, response, **kwargs):
        await asyncio.sleep(0.01)
        return 1.0 if response else 0.0


async_obj = AsyncCallable()


def batched_len(*, responses, **kwargs):
    return [float(len(r)) for r in responses]


def group_rank(*, responses, **kwargs):
    """Group reward: 1.0 for the longest response of the group, else 0.0."""
    best = max(len(r) for r in responses)
    return [1.0 if len(r) == best else 0.0 for r in responses]


def bad_batched(*, responses, **kwargs):
    return [1.0]


def verl_style(data_source, solution_str, ground_truth, extra_info=None):
    return 1.0 if solution_str.strip() == str(ground_truth) else 0.0


def trl_style(prompts, completions, **kwargs):
    return [float(len(c) > 3) for c in completions]


def slow_or_hang(*, response, **kwargs):
    if response == "hang":
        time.sleep(3600)
    time.sleep(0.01)
    return 1.0


def meet(*, response, extra_info=None, **kwargs):
    """1.0 once ``extra_info['k']`` calls are running at the same time (each leaves a file in
    ``extra_info['dir']`` and waits for the others). It has no deadline of its own: calls that never
    meet are ended by the term's ``timeout_s`` (an error row), so a slow host only makes it slower."""
    folder, k = extra_info["dir"], int(extra_info["k"])
    with open(os.path.join(folder, f"{os.getpid()}-{response}"), "w"):
        pass
    while len(os.listdir(folder)) < k:
        time.sleep(0.005)
    return 1.0
