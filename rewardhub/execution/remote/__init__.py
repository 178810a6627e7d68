"""The client of a ``rewardhub serve`` server (standard library only): the scorer of ``reward.remote``.

- :mod:`.client`: :class:`RemoteScorer`, a :class:`~rewardhub.execution.Scorer` whose rewards run on the
  server, and :func:`reached`, the scorer of a server that answered;
- :mod:`._http`: one bounded request; retries with backoff; :mod:`._answers`: answers checked.
"""

from __future__ import annotations

from ._http import IDEMPOTENCY_HEADER
from .client import START_RETRY_S
from .client import TOKEN_ENV
from .client import RemoteScorer
from .client import ServerUnavailable
from .client import reached

__all__ = ["IDEMPOTENCY_HEADER", "START_RETRY_S", "TOKEN_ENV", "RemoteScorer", "ServerUnavailable", "reached"]
