"""The code reward on Ray reward workers (a real local Ray cluster): hostile programs included."""

from __future__ import annotations

import pytest
from code_tasks import TASKS
from code_tasks import fenced
from rewardhub_code import sandbox

from rewardhub.distributed import runner_from_config

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.slow]


def test_a_batch_on_ray_reward_workers(local_ray):
    hostile = ["while True:\n    pass", "x = bytearray(10 << 30)",
               "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nos.kill(1, signal.SIGKILL)"]
    if sandbox.isolation_report()["enforced"]["pids_cgroup"]:
        hostile.append(
            "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
        )
    samples = []
    for _, gt, good, bad in TASKS[:3] + TASKS[-2:]:
        samples += [{"response": fenced(good), "ground_truth": gt, "extra_info": {"want": 1.0}},
                    {"response": fenced(bad), "ground_truth": gt, "extra_info": {"want": 0.0}}]
    samples += [
        {"response": fenced(p), "ground_truth": ["assert add(1, 2) == 3"], "extra_info": {"want": 0.0}}
        for p in hostile
    ]
    cfg = {"rewards": [{"name": "code_tests", "executor": "ray", "kwargs": {"all_or_nothing": True}}],
           # a good program must finish under load too
           "sandbox": {"timeout_s": 5.0}, "workers": {"num_workers": 2}}
    with runner_from_config(cfg) as runner:
        res = runner.score(samples)
        again = runner.score(samples[:2])  # the same workers are still there and still score
    assert [e for e in res.errors if e] == []
    assert res.scores == [s["extra_info"]["want"] for s in samples]
    assert again.scores == [1.0, 0.0]
    ran_on = {e["code_tests"]["backend"] for e in res.extra}
    assert ran_on == {"local"}
