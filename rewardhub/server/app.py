"""The aiohttp application: routes, bearer token, limits, and a start and drain that lose no request.

Routes: ``POST /score`` (own API), ``POST /get_reward`` (OpenRLHF), ``GET /health``, ``GET /metrics``
(Prometheus text), ``GET /info`` (the terms and their provenance, as ``rewardhub score --summary-json``
writes it). A bad request gets a 4xx with ``{"error": REASON}``; an unexpected failure while scoring
a 500 with its reason; neither stops the server. SIGTERM (or SIGINT) stops listening, answers the
requests already received, then exits 0.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from collections.abc import Awaitable
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import RewardhubError
from ..errors import UsageError
from ._batcher import MAX_CALLS
from ._batcher import Batcher
from ._conns import BACKLOG
from ._conns import ConnectionGate
from ._conns import EveryMinute
from ._conns import accept_errors_quietly
from ._conns import connection_limit
from ._endtext import DEFAULT_END_TOKENS
from ._endtext import EndTrimmer
from ._guard import is_loopback
from ._guard import refusal
from ._http import IDEMPOTENCY_HEADER
from ._idempotency import RecentRequests
from ._metrics import ServerMetrics
from ._protocols import openrlhf_answer
from ._protocols import openrlhf_rows
from ._protocols import own_rows

__all__ = ["MAX_CALLS", "ServeOptions", "build_app", "serve_forever"]


@dataclass(frozen=True)
class ServeOptions:
    host: str = "127.0.0.1"
    port: int = 8000
    token: str | None = None
    #: rows one request may send
    max_rows: int = 4096
    #: bytes one request body may have
    max_body: int = 64 * 1024 * 1024
    #: rows one Runner call may pool from waiting requests
    max_batch_rows: int = 4096
    #: seconds SIGTERM waits for the requests in flight (a second SIGTERM: none)
    drain_timeout: float = 120.0
    #: seconds a request's body may take to arrive
    read_timeout: float = 60.0
    #: seconds with every call slot busy after which ``/health`` answers 503 ``stuck``
    stuck_after: float = 300.0
    #: connections open at once (fewer where the file-descriptor limit needs it; see ``_conns``)
    max_connections: int = 1024
    #: Runner calls at once (see :data:`rewardhub.server._batcher.MAX_CALLS`)
    max_calls: int = MAX_CALLS
    #: texts stripped from the end of an OpenRLHF reply (see :mod:`rewardhub.server._endtext`)
    end_tokens: tuple[str, ...] = DEFAULT_END_TOKENS


def build_app(batcher: Batcher, metrics: ServerMetrics, opts: ServeOptions, info: Callable[[], Any]) -> Any:
    from aiohttp import web

    state = {"draining": False}
    recent: RecentRequests[list[dict[str, Any]]] = RecentRequests(max_rows=4 * opts.max_batch_rows)
    #: the handlers reading a body now: a drain cancels them (a half-sent body never holds it up)
    readers: set[asyncio.Task[Any]] = set()
    loopback = is_loopback(opts.host)
    trim = EndTrimmer(opts.end_tokens)
    not_prefix_log = EveryMinute()

    def reply(data: Any, status: int = 200) -> Any:
        return web.json_response(data, status=status, dumps=json_text)

    @web.middleware
    async def guard(request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        endpoint = request.path if request.path in ROUTES else "other"
        status = 500
        gate = request.app["rewardhub_gate"]
        if gate is not None:
            gate.request_started(request.transport)
        try:
            refused = refusal(request, token=opts.token, loopback=loopback, open_paths=OPEN_PATHS)
            if refused is not None:
                status = refused.status
                return web.json_response({"error": refused.error}, status=status, headers=refused.headers)
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as exc:
            status = exc.status
            if exc.status == 413:
                return reply(
                    {
                        "error": f"the request body is larger than this server's limit of {opts.max_body} "
                        "bytes; send smaller batches, or start the server with a larger --max-body-mb"
                    },
                    413,
                )
            return reply({"error": exc.reason}, exc.status)
        except _SlowBody as exc:
            status = 408
            return reply({"error": str(exc)}, status)
        except UsageError as exc:
            status = 413 if "more than this server's limit" in str(exc) else 400
            return reply({"error": str(exc)}, status)
        except RewardhubError as exc:
            status = 503 if state["draining"] else 500
            return reply({"error": str(exc)}, status)
        # a bug or a reward's failure under on_failure: raise; never the server's end
        except Exception as exc:
            return reply({"error": f"{type(exc).__name__}: {exc}"}, 500)
        finally:
            metrics.request(endpoint, status)
            if gate is not None:
                gate.request_done(request.transport)

    async def body_of(request: Any) -> Any:
        task = asyncio.current_task()
        assert task is not None
        readers.add(task)
        try:
            async with asyncio.timeout(opts.read_timeout):
                raw = await request.read()
        except TimeoutError:
            raise _SlowBody(
                f"the request body did not arrive within {opts.read_timeout:g}s (--read-timeout)"
            ) from None
        finally:
            readers.discard(task)
        try:
            return json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise UsageError("the request body is not UTF-8 text") from None
        except json.JSONDecodeError as exc:
            raise UsageError(f"the request body is not JSON: {exc}") from None

    async def scored(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        metrics.inflight += 1
        try:
            return await batcher.score(rows)
        finally:
            metrics.inflight -= 1

    async def score(request: Any) -> Any:
        rows = own_rows(await body_of(request), opts.max_rows)
        key, raw = request.headers.get(IDEMPOTENCY_HEADER), await request.read()
        return reply({"rows": await recent.answer(key, raw, len(rows), lambda: scored(rows))})

    async def get_reward(request: Any) -> Any:
        rows, not_prefix = openrlhf_rows(await body_of(request), opts.max_rows, trim)
        if not_prefix:
            metrics.prompt_not_prefix += not_prefix
            if not_prefix_log.due():
                print(f"rewardhub serve: WARNING: {not_prefix} of {len(rows)} queries of a /get_reward "
                      "request do not start with their prompt; each is scored whole, prompt included "
                      f"({metrics.prompt_not_prefix} so far: rewardhub_prompt_not_prefix_total in /metrics; "
                      "this line comes at most once a minute)", file=sys.stderr, flush=True)
        return reply(openrlhf_answer(await scored(rows)))

    async def health(request: Any) -> Any:
        stuck_for = batcher.stuck_for()
        status = "draining" if state["draining"] else "stuck" if stuck_for >= opts.stuck_after else "ok"
        body = {
            "status": status,
            "inflight": metrics.inflight,
            "calls": metrics.calls,
            "max_calls": batcher.max_calls,
            "busy_calls": batcher.busy_calls(),
            "rewards": list(metrics.terms),
        }
        if status == "stuck":
            body["error"] = (f"every call slot ({batcher.max_calls}) has been busy for {stuck_for:.0f}s: "
                             "a reward may hang with no timeout_s (give it one); new requests wait")
        return reply(body, 200 if status == "ok" else 503)

    async def metrics_text(request: Any) -> Any:
        gate = request.app["rewardhub_gate"]
        metrics.open_connections = len(gate) if gate is not None else 0
        return web.Response(text=metrics.render(), content_type="text/plain", charset="utf-8",
                            headers={"X-Content-Type": "text/plain; version=0.0.4"})

    async def info_json(request: Any) -> Any:  # the limits: what a client splits its batches by
        return reply({**info(), "limits": {"max_rows": opts.max_rows, "max_body": opts.max_body}})

    app = web.Application(middlewares=[guard], client_max_size=opts.max_body)
    app.router.add_post("/score", score)
    app.router.add_post("/get_reward", get_reward)
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", metrics_text)
    app.router.add_get("/info", info_json)
    app["rewardhub_state"] = state
    app["rewardhub_gate"] = None  # the ConnectionGate, once serve_forever listens
    app["rewardhub_readers"] = readers
    return app


class _SlowBody(RewardhubError):
    """A request's body did not arrive within ``--read-timeout`` (answered 408)."""


def json_text(data: Any) -> str:
    """``data`` as strict JSON: a NaN or infinite float (a failed row's score under ``on_failure: nan``,
    a reward's extra) is written ``null``, as JSON has no NaN; the row's ``errors`` say why."""
    try:
        return json.dumps(data, default=str, allow_nan=False)
    except ValueError:  # rare: walk the answer only when it holds one
        from ..scoring import nulls_for_non_finite

        return json.dumps(nulls_for_non_finite(data), default=str, allow_nan=False)


ROUTES = frozenset({"/score", "/get_reward", "/health", "/metrics", "/info"})
#: the routes that need no token (liveness)
OPEN_PATHS = frozenset({"/health"})


async def serve_forever(runner: Any, opts: ServeOptions, info: Callable[[], Any],
                        ready: Callable[[str, int], None]) -> list[dict[str, Any]]:
    """Serve until SIGTERM/SIGINT, then drain: stop listening, drop the requests whose body is still
    coming, answer what was received within ``drain_timeout`` (a second signal: at once), answer the
    rest 503, and return the Runner calls still running then (a reward that hangs), whose threads
    only the process's end can stop."""
    from aiohttp import web

    metrics = ServerMetrics([t.name for t in runner.terms])
    batcher = Batcher(runner, metrics, max_batch_rows=opts.max_batch_rows, max_calls=opts.max_calls)
    batcher.start()
    app = build_app(batcher, metrics, opts, info)
    # the drain below answers every handler before the runner's cleanup, which then only closes.
    # handler_cancellation: a client that goes away cancels its handler, so its rows still queued are
    # never scored (a request sent with an Idempotency-Key is shielded: its retry will want the answer)
    app_runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=5.0,
                               handler_cancellation=True)
    await app_runner.setup()
    loop = asyncio.get_running_loop()
    closed_log = EveryMinute()
    loop.set_exception_handler(accept_errors_quietly(closed_log))

    def on_close(reason: str) -> None:
        metrics.connections_closed[reason] = metrics.connections_closed.get(reason, 0) + 1
        if closed_log.due():
            print(f"rewardhub serve: WARNING: closed connections that did not send their request's headers "
                  f"(within --read-timeout {opts.read_timeout:g}s, or to make room at the limit of "
                  f"{gate.limit} connections): {dict(metrics.connections_closed)} so far "
                  "(rewardhub_connections_closed_total in /metrics; this line comes at most once a minute)",
                  file=sys.stderr, flush=True)

    assert app_runner.server is not None  # set up above
    limit = connection_limit(opts.max_connections)
    gate = ConnectionGate(app_runner.server, limit, opts.read_timeout, on_close)
    app["rewardhub_gate"] = gate
    try:
        listening = await loop.create_server(gate, opts.host, opts.port, reuse_address=True, backlog=BACKLOG)
    except OSError as exc:
        await app_runner.cleanup()
        raise UsageError(f"cannot listen on {opts.host}:{opts.port}: {exc.strerror or exc}\n"
                         "pick another --port (0: any free port) or --host") from None
    gate.start()
    port = int(listening.sockets[0].getsockname()[1])  # the bound port (the OS's choice for --port 0)
    stop, hurry = asyncio.Event(), asyncio.Event()

    def on_signal() -> None:
        if stop.is_set():
            hurry.set()
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    ready(opts.host, port)
    try:
        await stop.wait()
    finally:
        deadline = time.monotonic() + opts.drain_timeout
        app["rewardhub_state"]["draining"] = True
        print(f"rewardhub serve: draining ({metrics.inflight} requests in flight, up to "
              f"{opts.drain_timeout:g}s; a second SIGTERM stops at once)", file=sys.stderr, flush=True)
        listening.close()  # no new connections
        gate.stop()
        for task in list(app["rewardhub_readers"]):
            task.cancel()  # a body still coming: never scored, so never waited for
        stuck = await batcher.drain(deadline, hurry)
        await app_runner.cleanup()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    return stuck
