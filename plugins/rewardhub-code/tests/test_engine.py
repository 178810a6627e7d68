"""Through the execution engine: a batch of code samples in parallel process workers, hostile ones included.

The reward is resolved from its installed entry point, the config's ``reward.sandbox`` section
reaches it as the ``sandbox`` keyword argument, every sample gets exactly one result, and the
workers that ran the hostile programs neither crashed nor had to be killed.
"""

from __future__ import annotations

import math
import os
import time

import pytest
from code_tasks import TASKS
from code_tasks import fenced
from fake_sandbox_fusion import FakeSandboxFusion
from leftovers import sandbox_processes
from rewardhub_code import sandbox

from rewardhub.execution import Runner

GUARDED = sandbox.isolation_report()["enforced"]["pids_cgroup"]
ADD_TESTS = ["assert add(2, 3) == 5"]

HOSTILE = {
    "loop": "while True:\n    pass",
    "sleep": "import time\ntime.sleep(60)",
    "memory": "x = bytearray(10 << 30)",
    "output": "while True:\n    print('x' * 10000)",
    "kill_all": "import os, signal\nfor pid in range(1, 4096):\n    try:\n"
                "        os.kill(pid, signal.SIGKILL)\n    except OSError:\n        pass\n"
                "os.kill(os.getppid(), signal.SIGKILL)",
}
if GUARDED:  # a fork bomb only ever runs under a process-count guard
    HOSTILE["fork_bomb"] = (
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    )


def _samples():
    rows = []
    for name, gt, good, bad in TASKS[:8]:
        rows.append(
            {"prompt": name, "response": fenced(good), "ground_truth": gt, "extra_info": {"want": 1.0}}
        )
        rows.append(
            {"prompt": name, "response": fenced(bad), "ground_truth": gt, "extra_info": {"want": 0.0}}
        )
    for name, prog in HOSTILE.items():
        rows.append({"prompt": name, "response": fenced(prog), "ground_truth": ADD_TESTS,
                     "extra_info": {"want": 0.0}})
    return rows


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def test_a_batch_in_process_workers():
    cfg = {"rewards": [{"name": "code_tests", "executor": "process", "max_concurrency": 2, "timeout_s": 30,
                        "kwargs": {"all_or_nothing": True}}],
           "sandbox": {"timeout_s": 1.5, "memory_limit_mb": 512}}
    samples = _samples()
    with Runner.from_config(cfg, process_workers=2) as runner:
        warm = runner.score(samples[:2])
        assert warm.scores == [1.0, 0.0]
        pool = runner._get_pool()
        res = runner.score(samples)
        # no worker died or had to be killed (the pool may swap a waiting worker for a spare: not a death)
        assert pool.crashes == 0 and pool.kills == 0
        assert all(_alive(p) for p in runner.worker_pids())
    assert len(res.scores) == len(samples)
    for s, score, extra, err in zip(samples, res.scores, res.extra, res.errors):
        assert err == {}, (s["prompt"], err)
        assert score == s["extra_info"]["want"], (s["prompt"], extra)
    kinds = {
        s["prompt"]: e["code_tests"]["error"] for s, e in zip(samples, res.extra) if s["prompt"] in HOSTILE
    }
    assert kinds["loop"] == kinds["sleep"] == "timeout" and kinds["memory"] == "memory"
    assert kinds["output"] == "output_limit"
    assert res.metrics["rewards/code_tests/count"] == len(samples)


def test_reward_sandbox_url_routes_every_worker_to_the_server():
    with FakeSandboxFusion() as srv:
        cfg = {"rewards": [{"name": "code_tests", "executor": "process"}],
               "sandbox": {"url": srv.url, "max_concurrent": 2, "memory_limit_mb": 256}}
        samples = [{"response": fenced(good), "ground_truth": gt} for _, gt, good, _ in TASKS[:4]]
        with Runner.from_config(cfg, process_workers=2) as runner:
            res = runner.score(samples)
    assert res.scores == [1.0] * 4
    assert {e["code_tests"]["backend"] for e in res.extra} == {"remote"}
    assert len(srv.requests) == 4 and {r["memory_limit_MB"] for r in srv.requests} == {256}


def test_term_kwargs_sandbox_wins_over_the_section():
    cfg = {"rewards": [{"name": "code_tests", "executor": "thread", "kwargs": {"sandbox": {"timeout_s": 2}}}],
           "sandbox": {"url": "http://127.0.0.1:9/run_code"}}
    _, gt, good, _ = TASKS[0]
    with Runner.from_config(cfg) as runner:
        res = runner.score([{"response": fenced(good), "ground_truth": gt}])
    assert res.scores == [1.0] and res.extra[0]["code_tests"]["backend"] == "local"


@pytest.mark.parametrize("executor", ["thread", "process"])
def test_bad_ground_truth_is_an_error_result_naming_the_fix(executor):
    cfg = {"rewards": [{"name": "code_tests", "executor": executor}]}
    with Runner.from_config(cfg) as runner:
        res = runner.score([{"response": "```python\nx = 1\n```", "ground_truth": {"foo": 1}},
                            {"response": fenced(TASKS[0][2]), "ground_truth": TASKS[0][1]}])
    assert res.scores[1] == 1.0
    assert "ground_truth has keys ['foo']" in res.errors[0]["code_tests"]


def test_a_worker_killed_mid_run_takes_its_program_along():
    # the policy's 1 s timeout kills the worker while its program (allowed 20 s) still runs
    cfg = {
        "rewards": [
            {"name": "code_tests", "executor": "process", "timeout_s": 1.0, "kwargs": {"timeout_s": 20}}
        ]
    }
    prog = "import os, time\nfor _ in range(4):\n    os.fork()\ntime.sleep(30)"
    with Runner.from_config(cfg, process_workers=1) as runner:
        res = runner.score([{"response": fenced(prog), "ground_truth": ADD_TESTS}])
        assert runner._get_pool().kills == 1
    assert math.isnan(res.scores[0]) and "timed out after 1s; worker killed" in res.errors[0]["code_tests"]
    deadline = time.monotonic() + 20
    while sandbox_processes() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sandbox_processes() == []  # the 16 sleepers died with the worker
    # what a dead scorer cannot remove (an empty cgroup, its working directory) the next runs reap
    assert sandbox.reap_stale() == len(sandbox.SandboxLimits().uids)


def test_legacy_sandbox_fusion_keys_reach_the_reward(tmp_path):
    from rewardhub.config import load_plan
    from rewardhub.errors import RewardhubDeprecationWarning

    with FakeSandboxFusion() as srv:
        path = tmp_path / "legacy.yaml"
        path.write_text(
            f"reward_model:\n  sandbox_fusion:\n    url: {srv.url}/run_code\n    max_concurrent: 2\n"
            "    memory_limit_mb: 300\nreward:\n  rewards:\n    - name: code_tests\n"
        )
        with pytest.warns(RewardhubDeprecationWarning) as rec:
            cfg = load_plan(str(path))
        assert any(
            "sandbox_fusion.url" in str(w.message) and "reward.sandbox.url" in str(w.message) for w in rec
        )
        assert cfg.reward.sandbox.url == f"{srv.url}/run_code"
        _, gt, good, bad = TASKS[1]
        with Runner.from_config(cfg.reward, process_workers=2) as runner:
            res = runner.score([{"response": fenced(good), "ground_truth": gt},
                                {"response": fenced(bad), "ground_truth": gt}])
    assert res.scores[0] == 1.0 and res.scores[1] < 1.0
    assert [r["memory_limit_MB"] for r in srv.requests] == [300, 300]
