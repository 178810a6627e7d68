"""The real ``rewardhub serve`` application (:func:`rewardhub.server.app.create_app`) on 127.0.0.1, served
by aiohttp on an event loop of its own thread, so that synchronous clients (``RemoteScorer``) and
asynchronous ones can talk to it from a test."""

from __future__ import annotations

import asyncio
import threading
from typing import Any


class ThreadServer:
    """Serves ``runner`` with ``ServeOptions(**options)`` until :meth:`close`; ``url`` is its address."""

    def __init__(self, runner: Any, **options: Any) -> None:
        from rewardhub.server.app import ServeOptions

        self.runner = runner
        self.opts = ServeOptions(**options)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.url = asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(60)

    async def _start(self) -> str:
        from aiohttp import web

        from rewardhub.server.app import create_app

        runner = self.runner
        self.app = create_app(runner, self.opts, lambda: {"terms": [f.as_dict() for f in runner.facts],
                                                          "rewards": [], "aggregation": runner.aggregation})
        self.app_runner = web.AppRunner(self.app, handler_cancellation=True, access_log=None)
        await self.app_runner.setup()
        site = web.TCPSite(self.app_runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return f"http://127.0.0.1:{port}"

    def run(self, coro: Any, timeout: float = 120) -> Any:
        """Run ``coro`` on the server's loop and wait for its value."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.run(self.app_runner.cleanup(), 60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)
        self.loop.close()
