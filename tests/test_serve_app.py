"""The serve app is an aiohttp application factory: served here by aiohttp's own test server on 127.0.0.1
(no `rewardhub serve` process, no signal handling), its start-up makes the batcher, its handlers score
through it, and its cleanup drains it."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("aiohttp")


def test_the_app_factory_runs_on_aiohttps_own_server_and_cleans_up():
    from aiohttp import ClientSession
    from aiohttp.test_utils import TestServer

    from rewardhub.config.schema import validate_reward
    from rewardhub.errors import RewardhubError
    from rewardhub.execution import Runner
    from rewardhub.server.app import BATCHER
    from rewardhub.server.app import STATE
    from rewardhub.server.app import ServeOptions
    from rewardhub.server.app import create_app

    rows = [{"response": "4", "ground_truth": "4"}, {"response": "5", "ground_truth": "4"}, {"response": "4"}]

    async def main() -> None:
        with Runner.from_config(validate_reward({"rewards": [{"name": "exact_match"}]})) as runner:
            app = create_app(runner, ServeOptions(), lambda: {"terms": [f.as_dict() for f in runner.facts]})
            async with TestServer(app, host="127.0.0.1") as server, ClientSession() as session:
                async with session.post(server.make_url("/score"), json={"rows": rows}) as r:
                    assert r.status == 200, await r.text()
                    got = (await r.json())["rows"]
                async with session.get(server.make_url("/health")) as r:
                    health = await r.json()
                async with session.get(server.make_url("/info")) as r:
                    info = await r.json()
            batcher = app[BATCHER]
            assert [g["score"] for g in got] == [1.0, 0.0, None]
            assert [*got[2]["errors"]] == ["exact_match"]  # a row with no ground truth: never scored
            assert got[2]["errors"]["exact_match"].startswith("no ground truth")
            assert health["status"] == "ok" and health["rewards"] == ["exact_match"]
            assert info["limits"] == {"max_rows": 4096, "max_body": 64 * 1024 * 1024}
            assert app[STATE].metrics.inflight == 0
            # the cleanup drained the batcher: it takes no more rows
            with pytest.raises(RewardhubError, match="shutting down"):
                await batcher.score(rows)

    asyncio.run(main())
