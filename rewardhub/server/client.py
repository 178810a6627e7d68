"""A client of ``rewardhub serve``'s own API (standard library only): what ``reward.remote: URL`` scores with.

:class:`RemoteScorer` scores samples on a server and gives back what a Runner gives (``scores``,
``rewards``, ``extra``, ``errors``, ``metrics`` with ``rewards/<term>/...``), so a trainer can score
on another machine (a CPU pool beside a GPU cluster) without the rewards installed where it runs.
The bearer token, when the server wants one, comes from ``$REWARDHUB_SERVE_TOKEN``.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from ..config.schema import check_url
from ..errors import RewardhubError
from . import TOKEN_ENV

__all__ = ["RemoteResult", "RemoteScorer", "check_url"]


class RemoteResult:
    """One batch's scores from the server, shaped like :class:`rewardhub.execution.ScoreResult`
    (``scores``, ``rewards``, ``extra``, ``errors``, ``metrics``, ``columns``); a failed row's ``null``
    score is None, which the trainer reads as NaN, as it reads the core's ``on_failure: nan``."""

    def __init__(self, rows: list[dict[str, Any]], terms: Sequence[str]) -> None:
        from ..execution import ERROR
        from ..execution import TIMEOUT
        from ..execution import Column
        from ..execution import column_metrics
        from ..execution import stats

        self.scores: list[float | None] = [r.get("score") for r in rows]
        self.rewards: list[dict[str, float | None]] = [dict(r.get("rewards") or {}) for r in rows]
        self.extra: list[dict[str, Any]] = [dict(r.get("extra") or {}) for r in rows]
        self.errors: list[dict[str, str]] = [dict(r.get("errors") or {}) for r in rows]
        mean, std, count = stats(self.scores)
        self.metrics: dict[str, float] = {
            "reward/mean": mean,
            "reward/std": std,
            "reward/count": float(count),
        }
        #: per term, its values and failures (what the trainer counts failed calls from)
        self.columns: dict[str, Column] = {}
        for name in terms:
            col = self.columns[name] = Column(len(rows))
            for i, (rew, err) in enumerate(zip(self.rewards, self.errors)):
                col.values[i] = rew.get(name)
                if name in err:
                    col.status[i] = TIMEOUT if "timed out" in err[name] else ERROR
                    col.errors[i] = err[name]
            self.metrics.update({k: v for k, v in column_metrics(name, col).items() if "latency" not in k})


class RemoteScorer:
    """Scores on a ``rewardhub serve`` server; the interface the trainer's reward client drives
    (``score``, ``fingerprint``, ``workers_info``, ``pools``, ``last_pids``, ``close``)."""

    def __init__(self, url: str, *, timeout_s: float = 600.0, tries: int = 3) -> None:
        self.url = check_url(url)
        self.timeout_s = timeout_s
        self.tries = tries
        self.token = os.environ.get(TOKEN_ENV) or None
        self.last_pids: list[int] = []
        self.restarts = 0
        self.rescored_samples = 0
        self._info: dict[str, Any] | None = None

    def _request(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        for attempt in range(self.tries):
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    return json.loads(resp.read().decode("utf-8"))
            except urllib.error.HTTPError as exc:
                try:
                    reason = json.loads(exc.read().decode("utf-8")).get("error", exc.reason)
                except (ValueError, AttributeError):
                    reason = exc.reason
                hint = f" (set ${TOKEN_ENV})" if exc.code == 401 else ""
                raise RewardhubError(
                    f"reward server {self.url}{path} answered {exc.code}: {reason}{hint}"
                ) from None
            except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
                if attempt + 1 == self.tries:
                    why = getattr(exc, "reason", exc)
                    raise RewardhubError(
                        f"reward server {self.url} cannot be reached: {why}\n"
                        "is `rewardhub serve` running there, and is the address right?"
                    ) from None
                time.sleep(min(2.0**attempt, 5.0))
        raise AssertionError("unreachable")

    def info(self) -> dict[str, Any]:
        """The server's terms and their provenance (``GET /info``), asked once."""
        if self._info is None:
            self._info = dict(self._request("GET", "/info"))
        return self._info

    @property
    def terms(self) -> list[str]:
        return [t["name"] for t in self.info().get("terms", [])]

    def score(self, samples: Sequence[Mapping[str, Any]]) -> RemoteResult:
        """The server's scores of ``samples`` (JSON: values that are not JSON are sent as text)."""
        if not samples:
            return RemoteResult([], self.terms)
        body = json.loads(json.dumps({"rows": [dict(s) for s in samples]}, default=str))
        rows = self._request("POST", "/score", body)["rows"]
        if len(rows) != len(samples):
            raise RewardhubError(
                f"reward server {self.url} answered {len(rows)} rows for {len(samples)} samples"
            )
        self.last_pids = sorted(
            {
                w["pid"]
                for r in self.info().get("rewards", [])
                for w in r.get("workers", [])
                if isinstance(w.get("pid"), int)
            }
        )
        return RemoteResult(rows, self.terms)

    def fingerprint(self) -> str:
        return f"remote:{self.url}"

    def workers_info(self) -> list[dict[str, Any]]:
        return []

    def pools(self) -> list[RemoteScorer]:
        return [self]

    def close(self) -> None:
        pass
