"""``rewardhub serve``: a ``reward:`` config behind HTTP (needs the ``rewardhub[serve]`` extra: aiohttp).

- :mod:`._batcher`: requests from many clients pooled into Runner calls, split back per request;
- :mod:`._protocols`: the request and answer formats (the ``score`` row format, OpenRLHF's ``/get_reward``);
- :mod:`._metrics`: per-reward counters and latencies, as Prometheus text;
- :mod:`.app`: the aiohttp application (routes, bearer token, limits) and its start and drain;
- :mod:`._idempotency`: recent requests by ``Idempotency-Key`` (a retried request is scored once);
- :mod:`.client`: a small HTTP client (standard library only) for the server's own API (``reward.remote``),
  with :mod:`._http` (one bounded request; retries with backoff) and :mod:`._answers` (answers checked).

Importing this package imports nothing heavy; aiohttp is imported when a server is built.
"""

from __future__ import annotations

__all__ = ["TOKEN_ENV"]

#: the environment variable that holds the bearer token (never a command-line flag: a flag shows in `ps`)
TOKEN_ENV = "REWARDHUB_SERVE_TOKEN"
