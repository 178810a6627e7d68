"""``rewardhub serve CONFIG``: the config's ``reward:`` section behind HTTP (OpenRLHF's protocol and our own).

Scored by the same Runner as ``rewardhub score`` (pool, timeouts, ``on_failure``, metrics,
provenance); see :mod:`rewardhub.server`. Needs the ``rewardhub[serve]`` extra (aiohttp).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
from typing import Any

from ..errors import UsageError

NAME = "serve"
HELP = "serve the config's rewards over HTTP (POST /score, OpenRLHF's POST /get_reward, /health, /metrics)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ..server import MAX_CALLS
    from ..server import TOKEN_ENV

    parser.add_argument("config", help="YAML config with a reward: section (legacy keys are migrated)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides")
    parser.add_argument("--host", default="127.0.0.1",
                        help=f"address to listen on (default 127.0.0.1; any other needs ${TOKEN_ENV})")
    parser.add_argument(
        "--port", type=int, default=8000, help="port (default 8000; 0: any free port, printed)"
    )
    parser.add_argument("--max-rows", type=int, default=4096, help="rows one request may send (default 4096)")
    parser.add_argument(
        "--max-body-mb", type=float, default=64.0, help="MiB one request body may have (default 64)"
    )
    parser.add_argument(
        "--max-waiting-mb", type=float, default=128.0,
        help="MiB of request bodies the server holds at once, read and waiting or being scored (default 128; "
        "one body is always let in): past it a request is answered 503 with Retry-After, which the "
        "remote client retries, so a busy server's memory stays bounded",
    )
    parser.add_argument("--max-batch-rows", type=int, default=4096,
                        help="rows one Runner call pools from the requests waiting (default 4096)")
    parser.add_argument(
        "--max-calls",
        type=int,
        default=MAX_CALLS,
        help=f"Runner calls at once (default {MAX_CALLS}; they share the process pool, so a call held by a "
        "hanging reward does not stop the others; what waits while all are busy is pooled "
        "into one call); 1 with executor: ray terms",
    )
    parser.add_argument(
        "--tokenizer",
        metavar="NAME_OR_PATH",
        help="the policy's tokenizer (folder or hub name): POST /get_reward strips its special tokens from "
        "the end of each reply (OpenRLHF decodes them into the query, e.g. 'Paris<|im_end|>')",
    )
    parser.add_argument(
        "--end-token",
        action="append",
        metavar="TEXT",
        help="a text POST /get_reward strips from the end of each reply (repeatable; replaces the defaults: "
        "<|im_end|>, <|endoftext|>, </s>, <|eot_id|>, <eos>, <end_of_turn> and others of common chat "
        "templates)",
    )
    parser.add_argument("--drain-timeout", type=float, default=120.0,
                        help="seconds SIGTERM waits for the requests being scored (default 120; a second "
                        "SIGTERM: none); a body still arriving is not waited for")
    parser.add_argument("--read-timeout", type=float, default=60.0,
                        help="seconds a client has to send a request's headers, and then its body "
                        "(default 60)")
    parser.add_argument("--max-connections", type=int, default=1024,
                        help="client connections open at once (default 1024; fewer where the open-file "
                        "limit needs it); at the limit a new one replaces the one idle longest without "
                        "a request")
    parser.add_argument("--stuck-after", type=float, default=300.0,
                        help="seconds with every call slot busy after which GET /health answers 503 'stuck' "
                        "(default 300)")


def _end_tokens(args: argparse.Namespace) -> tuple[str, ...]:
    from ..server import DEFAULT_END_TOKENS
    from ..server import tokenizer_end_tokens

    given = [t for t in args.end_token or [] if t]
    if args.end_token and not given:
        raise UsageError(
            "--end-token '' names no text\ngive the end texts to strip, e.g. --end-token '<|im_end|>'"
        )
    if args.tokenizer:
        return tuple(tokenizer_end_tokens(args.tokenizer)) + tuple(given)
    return tuple(given) or DEFAULT_END_TOKENS


def run(args: argparse.Namespace) -> int:
    from .._extras import require
    from ..config import load_plan
    from ..scorers import open_scorer
    from ..server import TOKEN_ENV
    from ..server import check_token
    from ..server import exits_fail_the_sample
    from ..server import is_loopback

    require("aiohttp", "rewardhub serve")
    from ..server.app import ServeOptions
    from ..server.app import serve_forever

    for flag, value in (("--max-rows", args.max_rows), ("--max-batch-rows", args.max_batch_rows),
                        ("--max-body-mb", args.max_body_mb), ("--max-waiting-mb", args.max_waiting_mb),
                        ("--drain-timeout", args.drain_timeout),
                        ("--max-calls", args.max_calls), ("--read-timeout", args.read_timeout),
                        ("--stuck-after", args.stuck_after), ("--max-connections", args.max_connections)):
        if not math.isfinite(value):  # a NaN passes every comparison, and int(inf) has no answer
            raise UsageError(f"{flag} {value} is not a number of {'MiB' if 'mb' in flag else 'seconds'}"
                             "\ngive a finite number above 0")
        if value <= 0:
            raise UsageError(f"{flag} {value} must be above 0")
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port {args.port} is not a port (0-65535; 0: any free port)")
    token = os.environ.get(TOKEN_ENV) or None
    if token is not None:
        check_token(token, TOKEN_ENV)
    if token is None and not is_loopback(args.host):
        raise UsageError(f"--host {args.host} listens beyond this machine, and ${TOKEN_ENV} is not set\n"
                         f"set {TOKEN_ENV} to a secret the clients send as 'Authorization: Bearer ...', "
                         "or listen on 127.0.0.1")
    opts = ServeOptions(
        token=token, end_tokens=_end_tokens(args), max_batch_rows=max(args.max_batch_rows, args.max_rows),
        max_body=int(args.max_body_mb * 1024 * 1024), max_waiting=int(args.max_waiting_mb * 1024 * 1024),
        **{k: getattr(args, k) for k in ("host", "port", "max_rows", "drain_timeout", "read_timeout",
                                         "stuck_after", "max_connections", "max_calls")},
    )
    plan = load_plan(args.config, args.overrides)
    runner = open_scorer(plan.reward)
    with contextlib.closing(runner):
        if not runner.facts:
            raise UsageError(f"{args.config}: the reward: section has no reward terms to serve\n"
                             "add reward.rewards: [{name: ...}] (see `rewardhub list`)")

        def info() -> dict[str, Any]:
            return {
                "terms": [f.as_dict() for f in runner.facts],
                "rewards": runner.provenance(),
                "aggregation": runner.aggregation,
            }

        def ready(host: str, port: int) -> None:
            names = ", ".join(f.name for f in runner.facts)
            print(
                f"rewardhub serve: {names} on http://{host}:{port} "
                "(POST /score, POST /get_reward, GET /health, GET /metrics; token "
                f"{'on' if token else 'off'})",
                flush=True,
            )

        import asyncio

        with exits_fail_the_sample():  # a reward's os._exit on the inline executor: its sample fails
            stuck = asyncio.run(serve_forever(runner, opts, info, ready))
    if stuck:
        # a reward hung in one of our threads, which nothing can stop; the pool's processes are closed
        # (the with block above): end the process rather than wait for the thread at exit for ever
        names = ", ".join(repr(f.name) for f in runner.facts)
        longest = stuck[0]["seconds"]
        print(f"ERROR: rewardhub serve stopped with {len(stuck)} Runner call(s) still running (the longest "
              f"for {longest:g}s; rewards {names}); their requests were answered 503\na reward with no "
              "timeout_s may hang for ever: give it one (or allow a longer --drain-timeout)",
              file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(1)
    print("rewardhub serve: stopped", file=sys.stderr, flush=True)
    return 0
