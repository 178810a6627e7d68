"""An async reward that makes a blocking call holds its event loop; with trainer.reward_timeout_s the
calls of a step must still run side by side, not one timeout after another (the execution layer's
asyncio executor, which the reward workers use, stands the held loop's other calls on threads)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rewardhub_trainer.cli import train

pytestmark = pytest.mark.ray

#: each call blocks (time.sleep: it holds the loop) until the calls of its group of 4 have all begun
MEETS = '''
import threading
import time

_lock = threading.Lock()
_started = [0]

async def meets(*, response, **kwargs):
    with _lock:
        _started[0] += 1
        goal = -(-_started[0] // 4) * 4  # the next multiple of 4: this call's group
    deadline = time.monotonic() + 60
    while _started[0] < goal and time.monotonic() < deadline:
        time.sleep(0.01)
    return 1.0 if _started[0] >= goal else 0.0
'''


@pytest.mark.timeout(400)
def test_an_async_reward_that_blocks_is_scored_within_the_reward_timeout(ray_session, tiny_config, tmp_path):
    """Run one after another, each call would wait for the others of its group past its 5 s timeout
    (every sample invalid); side by side, every call answers in time."""
    path = tmp_path / "meets.py"
    path.write_text(MEETS)
    cfg = tiny_config(trainer={"total_steps": 2, "reward_timeout_s": 5, "max_reward_error_rate": 1.0},
                      reward={"rewards": [{"path": str(path), "function": "meets"}]})
    out = tmp_path / "o"
    summary = train(cfg, output=str(out))
    assert summary["steps"] == 2
    rows = [json.loads(line) for line in Path(out / "metrics.jsonl").read_text().splitlines()]
    for r in rows:
        assert r["samples/invalid"] == 0 and r["rewards/meets/error_rate"] == 0.0, r
        assert r["reward/mean"] == 1.0
