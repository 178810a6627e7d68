"""The aiohttp application: routes, bearer token, limits, and a start and drain that lose no request.

:func:`create_app` is the factory: module-level handlers, their state under typed ``web.AppKey`` keys,
the :class:`~._batcher.Batcher` started by the app's start-up and drained by its cleanup;
:func:`serve_forever` serves it until a signal, and drains it first.

Routes: ``POST /score`` (own API), ``POST /get_reward`` (OpenRLHF), ``GET /health`` (``?request=KEY``:
also what the server has of the request sent with that ``Idempotency-Key``), ``GET /metrics``
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
from dataclasses import field
from typing import Any

from aiohttp import web

from ..errors import TOO_LARGE
from ..errors import RewardhubError
from ..errors import UsageError
from ..execution import Scorer
from ..execution.remote import IDEMPOTENCY_HEADER
from . import MAX_CALLS
from ._batcher import Batcher
from ._body import Busy
from ._body import WaitingBytes
from ._body import strict_json
from ._conns import BACKLOG
from ._conns import ConnectionGate
from ._conns import EveryMinute
from ._conns import accept_errors_quietly
from ._conns import connection_limit
from ._conns import quiet_bad_requests
from ._endtext import DEFAULT_END_TOKENS
from ._endtext import EndTrimmer
from ._exitguard import keep_stop_signals
from ._exitguard import reclaim_stop_signals
from ._guard import is_loopback
from ._guard import refusal
from ._idempotency import RecentRequests
from ._metrics import ServerMetrics
from ._protocols import openrlhf_answer
from ._protocols import openrlhf_rows
from ._protocols import own_rows

__all__ = ["BATCHER", "OPTIONS", "STATE", "ServeOptions", "ServerState", "create_app", "serve_forever"]


@dataclass(frozen=True)
class ServeOptions:
    host: str = "127.0.0.1"
    port: int = 8000
    token: str | None = None
    #: rows one request may send
    max_rows: int = 4096
    #: bytes one request body may have
    max_body: int = 64 * 1024 * 1024
    #: bytes of request bodies held at once (read, waiting or being scored); past it a 503 (``_body``)
    max_waiting: int = 128 * 1024 * 1024
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
    #: Runner calls at once (see :data:`rewardhub.server.MAX_CALLS`)
    max_calls: int = MAX_CALLS
    #: texts stripped from the end of an OpenRLHF reply (see :mod:`rewardhub.server._endtext`)
    end_tokens: tuple[str, ...] = DEFAULT_END_TOKENS


@dataclass
class ServerState:
    """What the handlers share besides the options and the batcher (:data:`STATE`)."""

    #: the terms and their provenance (``/info``)
    info: Callable[[], Any]
    metrics: ServerMetrics
    recent: RecentRequests[list[dict[str, Any]]]
    trim: EndTrimmer
    loopback: bool
    draining: bool = False
    #: the ConnectionGate, once :func:`serve_forever` listens
    gate: ConnectionGate | None = None
    #: the handlers reading a body now: a drain cancels them (a half-sent body never holds it up)
    readers: set[asyncio.Task[Any]] = field(default_factory=set)
    not_prefix_log: EveryMinute = field(default_factory=EveryMinute)
    #: the bytes of the bodies held now (``--max-waiting-mb``)
    waiting: WaitingBytes = field(default_factory=lambda: WaitingBytes(ServeOptions.max_waiting))


OPTIONS = web.AppKey("rewardhub_options", ServeOptions)
STATE = web.AppKey("rewardhub_state", ServerState)
#: started by the app's start-up, drained by its cleanup (at once, where :func:`serve_forever` did not)
BATCHER = web.AppKey("rewardhub_batcher", Batcher)

ROUTES = frozenset({"/score", "/get_reward", "/health", "/metrics", "/info"})
#: the routes whose bodies are read (held within ``--max-waiting-mb`` until answered)
BODY_ROUTES = frozenset({"/score", "/get_reward"})
#: the routes that need no token (liveness)
OPEN_PATHS = frozenset({"/health"})


def create_app(runner: Scorer, opts: ServeOptions, info: Callable[[], Any]) -> web.Application:
    """The application serving the terms of ``runner`` (any :class:`~rewardhub.execution.Scorer`: a Runner,
    a pool of Ray reward workers, another server) through a :class:`Batcher`; it stays the caller's to
    close."""
    app = web.Application(middlewares=[guard], client_max_size=opts.max_body)
    metrics = ServerMetrics([f.name for f in runner.facts])
    app[OPTIONS] = opts
    app[STATE] = ServerState(info, metrics, RecentRequests(max_rows=4 * opts.max_batch_rows),
                             EndTrimmer(opts.end_tokens), is_loopback(opts.host),
                             waiting=WaitingBytes(opts.max_waiting))
    app[BATCHER] = Batcher(runner, metrics, max_batch_rows=opts.max_batch_rows, max_calls=opts.max_calls)
    app.router.add_post("/score", score_handler)
    app.router.add_post("/get_reward", get_reward)
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", metrics_text)
    app.router.add_get("/info", info_json)
    app.on_startup.append(_start_batcher)
    app.on_cleanup.append(_stop_batcher)
    return app


async def _start_batcher(app: web.Application) -> None:
    app[BATCHER].start()


async def _stop_batcher(app: web.Application) -> None:
    hurry = asyncio.Event()
    hurry.set()
    await app[BATCHER].drain(time.monotonic(), hurry)


@web.middleware
async def guard(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                ) -> web.StreamResponse:
    """The token and the Host/Origin checks first; every error a JSON ``{"error": REASON}``; every
    request counted."""
    opts, state = request.app[OPTIONS], request.app[STATE]
    endpoint = request.path if request.path in ROUTES else "other"
    status = 500
    gate = state.gate
    if gate is not None:
        gate.request_started(request.transport)
    try:
        refused = refusal(request, token=opts.token, loopback=state.loopback, open_paths=OPEN_PATHS)
        if refused is not None:
            status = refused.status
            return web.json_response({"error": refused.error}, status=status, headers=refused.headers)
        if request.method == "POST" and request.path in BODY_ROUTES:
            with state.waiting.holding(request.content_length, opts.max_body):  # until answered
                response = await handler(request)
        else:
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
    except Busy as exc:
        status = 503
        return web.json_response({"error": str(exc)}, status=status, headers={"Retry-After": "2"})
    except UsageError as exc:
        status = 413 if exc.kind == TOO_LARGE else 400
        return reply({"error": str(exc)}, status)
    except RewardhubError as exc:
        status = 503 if state.draining else 500
        return reply({"error": str(exc)}, status)
    # a bug or a reward's failure under on_failure: raise; never the server's end
    except Exception as exc:
        return reply({"error": f"{type(exc).__name__}: {exc}"}, 500)
    finally:
        state.metrics.request(endpoint, status)
        if gate is not None:
            gate.request_done(request.transport)


async def body_of(request: web.Request) -> Any:
    """The request's JSON body (strict JSON: :func:`._body.strict_json`), read within ``--read-timeout``."""
    opts, readers = request.app[OPTIONS], request.app[STATE].readers
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
    return strict_json(raw)


async def score_handler(request: web.Request) -> web.Response:
    app = request.app
    rows = own_rows(await body_of(request), app[OPTIONS].max_rows)
    key, raw = request.headers.get(IDEMPOTENCY_HEADER), await request.read()
    answer = await app[STATE].recent.answer(key, raw, len(rows), lambda: app[BATCHER].score(rows))
    reclaim_stop_signals()  # a call that started Ray gave SIGTERM to Ray's handler
    return reply({"rows": answer})


async def get_reward(request: web.Request) -> web.Response:
    state = request.app[STATE]
    rows, not_prefix = openrlhf_rows(await body_of(request), request.app[OPTIONS].max_rows, state.trim)
    if not_prefix:
        state.metrics.prompt_not_prefix += not_prefix
        if state.not_prefix_log.due():
            print(f"rewardhub serve: WARNING: {not_prefix} of {len(rows)} queries of a /get_reward "
                  "request do not start with their prompt; each is scored whole, prompt included "
                  f"({state.metrics.prompt_not_prefix} so far: rewardhub_prompt_not_prefix_total in "
                  "/metrics; this line comes at most once a minute)", file=sys.stderr, flush=True)
    answer = openrlhf_answer(await request.app[BATCHER].score(rows))
    reclaim_stop_signals()
    return reply(answer)


async def health(request: web.Request) -> web.Response:
    state, batcher = request.app[STATE], request.app[BATCHER]
    stuck_for = batcher.stuck_for()
    status = ("draining" if state.draining else
              "stuck" if stuck_for >= request.app[OPTIONS].stuck_after else "ok")
    body = {"status": status, "inflight": state.metrics.inflight, "calls": state.metrics.calls,
            "max_calls": batcher.max_calls, "busy_calls": batcher.busy_calls(),
            "rewards": list(state.metrics.terms), "held_body_bytes": state.waiting.held,
            "refused_busy": state.waiting.refused}
    key = request.query.get("request")
    if key:  # a client waiting for the answer to the request it sent with this Idempotency-Key
        body["request"] = state.recent.state(key)
    if status == "stuck":
        body["error"] = (f"every call slot ({batcher.max_calls}) has been busy for {stuck_for:.0f}s: "
                         "a reward may hang with no timeout_s (give it one); new requests wait")
    return reply(body, 200 if status == "ok" else 503)


async def metrics_text(request: web.Request) -> web.Response:
    state = request.app[STATE]
    state.metrics.open_connections = len(state.gate) if state.gate is not None else 0
    return web.Response(text=state.metrics.render(), content_type="text/plain", charset="utf-8",
                        headers={"X-Content-Type": "text/plain; version=0.0.4"})


async def info_json(request: web.Request) -> web.Response:  # the limits: what a client splits its batches by
    opts = request.app[OPTIONS]
    limits = {"max_rows": opts.max_rows, "max_body": opts.max_body}
    return reply({**request.app[STATE].info(), "limits": limits})


class _SlowBody(RewardhubError):
    """A request's body did not arrive within ``--read-timeout`` (answered 408)."""


def reply(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, dumps=json_text)


def json_text(data: Any) -> str:
    """``data`` as strict JSON: a NaN or infinite float (a failed row's score under ``on_failure: nan``,
    a reward's extra) is written ``null``, as JSON has no NaN; the row's ``errors`` say why."""
    try:
        return json.dumps(data, default=str, allow_nan=False)
    except ValueError:  # rare: walk the answer only when it holds one
        from ..scoring import nulls_for_non_finite

        return json.dumps(nulls_for_non_finite(data), default=str, allow_nan=False)


async def serve_forever(runner: Scorer, opts: ServeOptions, info: Callable[[], Any],
                        ready: Callable[[str, int], None]) -> list[dict[str, Any]]:
    """Serve until SIGTERM/SIGINT, then drain: stop listening, drop the requests whose body is still
    coming, answer what was received within ``drain_timeout`` (a second signal: at once), answer the
    rest 503, and return the Runner calls still running then (a reward that hangs), whose threads
    only the process's end can stop."""
    app = create_app(runner, opts, info)
    state = app[STATE]
    # the drain below answers every handler before the runner's cleanup, which then only closes.
    # handler_cancellation: a client that goes away cancels its handler, so its rows still queued are
    # never scored (a request sent with an Idempotency-Key is shielded: its retry will want the answer)
    bad_log = EveryMinute()

    def on_bad(reason: str) -> None:  # a request aiohttp's parser refused (answered 400, no traceback)
        closed = state.metrics.connections_closed
        closed["bad_request"] = closed.get("bad_request", 0) + 1
        if bad_log.due():
            print(f"rewardhub serve: WARNING: answered 400 to a request whose head could not be read "
                  f"({reason}): {closed['bad_request']} so far (rewardhub_connections_closed_total"
                  '{reason="bad_request"} in /metrics; this line comes at most once a minute)',
                  file=sys.stderr, flush=True)

    app_runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=5.0,
                               handler_cancellation=True, logger=quiet_bad_requests(on_bad))
    await app_runner.setup()
    loop = asyncio.get_running_loop()
    closed_log = EveryMinute()
    loop.set_exception_handler(accept_errors_quietly(closed_log))

    def on_close(reason: str) -> None:
        closed = state.metrics.connections_closed
        closed[reason] = closed.get(reason, 0) + 1
        if closed_log.due():
            print(f"rewardhub serve: WARNING: closed connections that did not send their request's headers "
                  f"(within --read-timeout {opts.read_timeout:g}s, or to make room at the limit of "
                  f"{gate.limit} connections): {dict(closed)} so far "
                  "(rewardhub_connections_closed_total in /metrics; this line comes at most once a minute)",
                  file=sys.stderr, flush=True)

    assert app_runner.server is not None  # set up above
    gate = state.gate = ConnectionGate(app_runner.server, connection_limit(opts.max_connections),
                                       opts.read_timeout, on_close)
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
    keeper = loop.create_task(keep_stop_signals())  # from Ray's handler, once a Ray term starts it
    ready(opts.host, port)
    try:
        await stop.wait()
    finally:
        keeper.cancel()
        deadline = time.monotonic() + opts.drain_timeout
        state.draining = True
        print(f"rewardhub serve: draining ({state.metrics.inflight} requests in flight, up to "
              f"{opts.drain_timeout:g}s; a second SIGTERM stops at once)", file=sys.stderr, flush=True)
        listening.close()  # no new connections
        gate.stop()
        for task in list(state.readers):
            task.cancel()  # a body still coming: never scored, so never waited for
        stuck = await app[BATCHER].drain(deadline, hurry)
        await app_runner.cleanup()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    return stuck
