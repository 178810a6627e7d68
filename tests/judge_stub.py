"""A stub OpenAI-compatible chat-completions server (aiohttp, 127.0.0.1) for what a real model server
cannot be made to do on demand: 429 storms, hangs, garbage replies, a judge that obeys injections.

``StubJudge.answer`` decides each reply: a function of (the request's JSON, its 0-based number) giving
``(status, text)``, where ``text`` is the reply's message content for status 200 (``raw:`` + text: the
whole body as is), or the special text ``"hang"`` (never answer; the stub notes when the client goes).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from typing import Any

Answer = Callable[[dict[str, Any], int], tuple[int, str]]


def completion(text: str) -> str:
    return json.dumps({"id": "x", "object": "chat.completion", "model": "stub",
                       "choices": [{"index": 0, "finish_reason": "stop",
                                    "message": {"role": "assistant", "content": text}}],
                       "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})


def _blocks(body: dict[str, Any], label: str) -> list[str]:
    import re

    user = body["messages"][-1]["content"]
    return re.findall(rf"<<<({label}-[0-9a-f]{{16}})\n(.*?)\n\1>>>", user, re.S)


def quality(text: str) -> float:
    """A graded text's true quality: the number after ``q=`` in it (0 when none)."""
    import re

    m = re.search(r"q=(-?\d+(?:\.\d+)?)", text)
    return float(m.group(1)) if m else 0.0


def pair_judge(p_first: float = 0.7, near: float = 1.0, seed: int = 0) -> Answer:
    """A pairwise judge that is right when the qualities of A and B differ by more than ``near``, and on
    near-ties picks the first position with probability ``p_first`` (else it is right: equal qualities
    are a tie)."""
    import random

    rng = random.Random(seed)
    lock = threading.Lock()

    def answer(body: dict[str, Any], n: int) -> tuple[int, str]:
        (_, a), = [b for b in _blocks(body, "A")]
        (_, b), = [b for b in _blocks(body, "B")]
        qa, qb = quality(a), quality(b)
        if abs(qa - qb) > near:
            return 200, f"Winner: {'A' if qa > qb else 'B'}"
        with lock:
            first = rng.random() < p_first
        return 200, f"Winner: {'A' if first or qa > qb else 'B' if qb > qa else 'tie'}"

    return answer


def rubric_judge(body: dict[str, Any], n: int) -> tuple[int, str]:
    """A rubric judge: criterion ``K`` is met when the response holds the word in the criterion's quotes."""
    import re

    user = body["messages"][-1]["content"]
    (_, response), = _blocks(body, "RESPONSE")
    lines = []
    for k, word in re.findall(r"Criterion (\d+): .*?'(\w+)'", user):
        lines.append(f"Criterion {k}: {'YES' if word in response else 'NO'} - looked for {word}")
    return 200, "\n".join(lines)


def score_judge(guess: bool = False, seed: int = 0) -> Answer:
    """A pointwise judge: ``Score: 10`` when the response's quality is 5 or more, else ``Score: 0``; with
    ``guess``, a coin flip instead. A request for logprobs gets the score's token with its top_logprobs."""
    import random

    rng = random.Random(seed)
    lock = threading.Lock()

    def answer(body: dict[str, Any], n: int) -> tuple[int, str]:
        (_, response), = _blocks(body, "RESPONSE")
        with lock:
            good = rng.random() < 0.5 if guess else quality(response) >= 5
        score = "10" if good else "0"
        if not body.get("logprobs"):
            return 200, f"Score: {score}"
        top = [{"token": score, "logprob": -0.1}, {"token": "5", "logprob": -2.5},
               {"token": "x", "logprob": -4.0}]
        reply = json.loads(completion(score))
        first = {"token": score, "logprob": -0.1, "top_logprobs": top}
        reply["choices"][0]["logprobs"] = {"content": [first]}
        return 200, "raw:" + json.dumps(reply)

    return answer


class StubJudge:
    """Runs in a thread of its own; ``url`` is its ``/v1`` base URL."""

    def __init__(self, answer: Answer | None = None, service_s: float = 0.0) -> None:
        self.answer: Answer = answer or (lambda body, n: (200, "Score: 7"))
        self.service_s = service_s
        self.requests: list[dict[str, Any]] = []  # body, headers, t (monotonic arrival)
        self.gone = 0  # hung requests whose client closed the connection
        self.in_flight = self.peak = 0
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        assert self._ready.wait(30), "the stub judge did not start"

    def reset(self, answer: Answer, service_s: float = 0.0) -> None:
        with self._lock:
            self.answer, self.service_s = answer, service_s
            self.requests.clear()
            self.gone = self.peak = 0

    async def _handle(self, request: Any) -> Any:
        from aiohttp import web

        body = await request.json()
        with self._lock:
            n = len(self.requests)
            self.requests.append({"body": body, "headers": dict(request.headers), "t": time.monotonic()})
            answer, service_s = self.answer, self.service_s
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
        try:
            status, text = answer(body, n)
            if text == "hang":
                while request.transport is not None and not request.transport.is_closing():
                    await asyncio.sleep(0.01)
                with self._lock:
                    self.gone += 1
                return web.Response(status=500)
            if service_s:
                await asyncio.sleep(service_s)
        finally:
            with self._lock:
                self.in_flight -= 1
        if status != 200:
            return web.Response(status=status, text=text, headers={"Retry-After": "0"})
        out = text[4:] if text.startswith("raw:") else completion(text)
        return web.Response(text=out, content_type="application/json")

    async def _arrivals(self, request: Any) -> Any:
        from aiohttp import web

        with self._lock:
            return web.json_response([r["t"] for r in self.requests])

    def _serve(self) -> None:
        from aiohttp import web

        async def main() -> None:
            app = web.Application()
            app.router.add_post("/v1/chat/completions", self._handle)
            app.router.add_post("/v1/embeddings", self._handle)  # answers given whole, as raw:
            app.router.add_get("/arrivals", self._arrivals)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            self.port = runner.addresses[0][1]
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            self._ready.set()
            await self._stop.wait()
            await runner.cleanup()

        asyncio.run(main())

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def close(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)


if __name__ == "__main__":  # a stub in a process of its own (bench/bench_judge.py): prints its port
    import sys

    stub = StubJudge(pair_judge() if sys.argv[2:3] == ["pair"] else None,  # argv: [service_s] [pair]
                     service_s=float(sys.argv[1]) if len(sys.argv) > 1 else 0.0)
    print(stub.port, flush=True)
    sys.stdin.read()  # until the parent closes our stdin
    stub.close()
