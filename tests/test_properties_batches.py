"""Properties of how batches are cut and pooled (issue 42 §1), over generated GRPO batches: scoring in
chunks (as `rewardhub score` cuts a file), through a server's request split, or through the process
pool equals scoring at once, group rewards included; what a `serve` client gets depends only on its own
request; every row scored before an interruption is in the kept output, with its own score."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

pytest.importorskip("aiohttp")

SETTINGS = settings(max_examples=20, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])
TERMS = [{"module": "rewards_groups", "function": "group_size", "kind": "group"},
         {"module": "rewards_groups", "function": "length", "weight": 0.5}]


@st.composite
def batches(draw: Any, max_group: int = 6, max_groups: int = 12) -> list[dict[str, Any]]:
    """GRPO-like rows: groups of 1..max_group rows, each with its uid (uids may repeat across prompts,
    start at 0 or not) and prompt; responses of varied length. A group's rows follow each other."""
    sizes = draw(st.lists(st.integers(1, max_group), min_size=1, max_size=max_groups))
    first = draw(st.integers(0, 3))
    rows = []
    for g, size in enumerate(sizes):
        prompt = f"q{draw(st.integers(0, 4))}" if draw(st.booleans()) else f"q-{g}"
        uid = first + g if draw(st.booleans()) else None  # None: grouped by prompt alone
        for _ in range(size):
            info = {} if uid is None else {"uid": uid}
            rows.append({"prompt": prompt, "response": "r" * draw(st.integers(0, 5)), "extra_info": info})
    return _adjacent(rows)


def _adjacent(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows with each group's rows together (as a rollout writes them), in order of first row."""
    groups: dict[Any, list[dict[str, Any]]] = {}
    for r in rows:  # a group: its uid and prompt, or its prompt alone
        groups.setdefault((r["extra_info"].get("uid"), r["prompt"]), []).append(r)
    return [r for group in groups.values() for r in group]


@pytest.fixture(scope="module")
def runner():
    from rewardhub.config.schema import validate_reward
    from rewardhub.execution import Runner

    with Runner.from_config(validate_reward({"rewards": TERMS})) as r:
        yield r


@pytest.fixture(scope="module")
def pool_runner():
    from rewardhub.config.schema import validate_reward
    from rewardhub.execution import Runner

    terms = [{**t, "executor": "process"} for t in TERMS]
    with Runner.from_config(validate_reward({"rewards": terms})) as r:
        yield r


@pytest.fixture(scope="module")
def server(runner):
    from thread_server import ThreadServer

    srv = ThreadServer(runner, max_rows=8, max_calls=1)  # requests queue behind a call, and are pooled
    try:
        yield srv
    finally:
        srv.close()


def at_once(runner: Any, rows: list[dict[str, Any]]) -> list[Any]:
    return runner.score(rows).scores


@pytest.mark.timeout(300)
@SETTINGS
@given(rows=batches(), sizes=st.lists(st.integers(1, 9), min_size=1, max_size=6))
def test_chunks_cut_between_groups_score_as_at_once(runner, rows, sizes):
    from rewardhub.scoring import GroupChunks

    chunks = GroupChunks([(r, r) for r in rows], whole_groups=True)
    got: list[Any] = []
    k = 0
    while chunk := chunks.take(sizes[k % len(sizes)]):
        got += runner.score([s for _, s in chunk]).scores
        k += 1
    assert got == at_once(runner, rows)


@pytest.mark.timeout(300)
@SETTINGS
@given(rows=batches())
def test_a_servers_request_split_scores_as_at_once(runner, server, rows):
    from rewardhub.execution.remote import RemoteScorer

    assert RemoteScorer(server.url).score(rows).scores == at_once(runner, rows)


@pytest.mark.timeout(300)
@settings(SETTINGS, max_examples=8)
@given(rows=batches())
def test_the_process_pool_scores_as_at_once(runner, pool_runner, rows):
    assert pool_runner.score(rows).scores == at_once(runner, rows)


@pytest.mark.timeout(300)
@SETTINGS
@given(a=batches(max_group=4, max_groups=2), b=batches(max_group=4, max_groups=2))
def test_a_serve_client_gets_what_its_own_request_gives(runner, server, a, b):
    from aiohttp import ClientSession

    async def both() -> list[Any]:
        async with ClientSession() as s:
            async def post(rows: list[dict[str, Any]]) -> Any:
                async with s.post(f"{server.url}/score", json={"rows": rows}) as r:
                    assert r.status == 200, await r.text()
                    return [row["score"] for row in (await r.json())["rows"]]

            return list(await asyncio.gather(post(a), post(b), post(a)))  # the last two pool, or wait

    got_a, got_b, again_a = server.run(both())
    assert got_a == again_a == at_once(runner, a) and got_b == at_once(runner, b)


@pytest.fixture(scope="module")
def stopper_runner():
    from rewardhub.config.schema import validate_reward
    from rewardhub.execution import Runner

    cfg = validate_reward({"rewards": [{"module": "rewards_groups", "function": "stopper"}]})
    with Runner.from_config(cfg) as r:
        yield r


@pytest.mark.timeout(300)
@SETTINGS
@given(n=st.integers(1, 600), data=st.data())
def test_every_row_scored_before_a_stop_is_kept(stopper_runner, n, data):
    import rewards_groups

    from rewardhub.execution import Cancel
    from rewardhub.scoring import score_rows
    from rewardhub.scoring import scored_before_stop

    rows = [{"response": "r" * (i % 7)} for i in range(n)]
    skip = {i: {"stopper": "skipped"} for i in data.draw(st.sets(st.integers(0, n - 1), max_size=3))}
    stop_at = data.draw(st.integers(1, max(1, n - len(skip))))  # the call after which the run stops
    cancel = Cancel()
    rewards_groups.CALLS[:] = []
    rewards_groups.STOP_AT, rewards_groups.STOP_HOOK = stop_at, cancel.set
    box: dict[str, Any] = {}

    def work() -> None:  # as `rewardhub score` scores a chunk: on a thread, the main one stopping it
        try:
            box["scored"] = score_rows(stopper_runner, rows, skip, cancel=cancel)
        except Exception as exc:
            box["error"] = exc

    worker = threading.Thread(target=work)
    worker.start()
    worker.join(120)
    rewards_groups.STOP_HOOK = None
    if "scored" in box:  # the stop came with the last call: every row scored
        kept = list(enumerate(box["scored"].results))
    else:
        kept = scored_before_stop(stopper_runner, n, skip, cancel.kept)
    scored = [i for i, _ in kept if i not in skip]
    called = len(rewards_groups.CALLS)
    assert called >= min(stop_at, n - len(skip))
    assert scored == [i for i in range(n) if i not in skip][:called]  # every call made is kept, in order
    assert all(r["score"] == float(len(rows[i]["response"])) for i, r in kept if i not in skip)
