"""``rewardhub serve``: a ``reward:`` config behind HTTP (needs the ``rewardhub[serve]`` extra: aiohttp).

- :mod:`._batcher`: requests from many clients pooled into Runner calls, split back per request;
- :mod:`._body`: request bodies read as strict JSON (no ``NaN``, ``1e400`` or key given twice);
- :mod:`._protocols`: the request and answer formats (the ``score`` row format, OpenRLHF's ``/get_reward``);
- :mod:`._metrics`: per-reward counters and latencies, as Prometheus text;
- :mod:`._endtext`: the end-of-turn texts OpenRLHF leaves on a reply, stripped by ``/get_reward``;
- :mod:`._guard`: the bearer token, and the Host/Origin/Content-Type checks that keep web pages out;
- :mod:`._exitguard`: a reward's ``os._exit`` in the server's process fails its sample, not the server;
- :mod:`._conns`: connections bounded in number and in the time they may take to send headers;
- :mod:`.app`: the aiohttp application factory (routes, bearer token, limits) and its start and drain;
- :mod:`._idempotency`: recent requests by ``Idempotency-Key`` (a retried request is scored once);

The client of this API (``reward.remote``) is :mod:`rewardhub.execution.remote`, beside the other scorers.

Importing this package imports nothing heavy; :mod:`.app` imports aiohttp.
"""

from __future__ import annotations

from ..execution.remote import TOKEN_ENV
from ._endtext import DEFAULT_END_TOKENS
from ._endtext import tokenizer_end_tokens
from ._exitguard import exits_fail_the_sample
from ._guard import check_token
from ._guard import is_loopback

__all__ = ["DEFAULT_END_TOKENS", "MAX_CALLS", "TOKEN_ENV", "check_token", "exits_fail_the_sample",
           "is_loopback", "tokenizer_end_tokens"]

#: Runner calls at once, by default. Concurrent calls share the same process-pool workers, so more
#: calls add no CPU; what they buy is that a call waiting on a hung reward (until its timeout_s) does
#: not stop the rest: with 4, three such calls may hang while the fourth still serves everyone else.
#: Few calls keep pooling: what waits while all are busy is scored as one call, in large chunks.
MAX_CALLS = 4
