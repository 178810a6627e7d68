"""A client of ``rewardhub serve``'s own API (standard library only): what ``reward.remote`` scores with.

:class:`RemoteScorer` scores samples on a server and gives back what a Runner gives (a
:class:`~rewardhub.execution.ScoreResult`: a failed call's error with its kind, ``metrics`` with
``rewards/<term>/...``), so a trainer can score on another machine (a CPU pool beside a GPU cluster)
without the rewards installed where it runs.
The bearer token, when the server wants one, comes from ``$REWARDHUB_SERVE_TOKEN``.

A run survives a server that restarts or drains: failures that pass are retried with backoff for
``reward.remote.retry_for_s`` (:mod:`._http`), and each request's ``Idempotency-Key`` makes sure that
a retried request is scored once. A batch is split into requests within the limits the server
publishes in ``GET /info`` (``limits.max_rows``, ``limits.max_body``; halved again on a 413). Every
answer row carries the index it was sent with and is checked (:mod:`._answers`).
"""

from __future__ import annotations

import itertools
import json
import os
import sys
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from ..._secrets import bearer_secrets
from ..._secrets import redact
from ...config.schema import RemoteConfig
from ...config.schema import check_url
from ...errors import RewardhubError
from ...errors import UsageError
from ...scoring import group_units
from .._facts import TermFacts
from .._results import ScoreResult
from ._answers import checked_info
from ._answers import checked_rows
from ._answers import json_of
from ._http import TOKEN_LABEL
from ._http import Answer
from ._http import Retrying
from ._http import ServerUnavailable
from ._http import reason_of

__all__ = ["START_RETRY_S", "TOKEN_ENV", "RemoteScorer", "ServerUnavailable", "check_url", "reached"]

#: the environment variable that holds the bearer token (never a command-line flag: a flag shows in `ps`)
TOKEN_ENV = "REWARDHUB_SERVE_TOKEN"

#: seconds the first question to a ``reward.remote`` server is retried: at the start, a server that does
#: not answer is more likely a wrong address than a restart
START_RETRY_S = 3.0


def reached(remote: RemoteConfig | str) -> RemoteScorer:
    """A scorer of ``reward.remote`` whose server answered ``GET /info`` with its terms (retried for
    :data:`START_RETRY_S` at most), before a run starts on it.

    :raises UsageError: the server cannot be reached, is not a ``rewardhub serve`` server, or has no terms.
    """
    scorer = RemoteScorer(remote)
    retry_for_s = scorer.http.retry_for_s
    scorer.http.retry_for_s = min(retry_for_s, START_RETRY_S)
    try:
        terms = scorer.facts
    except ServerUnavailable as exc:
        raise UsageError(f"reward.remote: reward server {exc.url} cannot be reached: {exc.last} ({exc.tries} "
                         f"tries in {exc.seconds:.0f} s)\nis `rewardhub serve` running there, and is the "
                         "address right?") from None
    except RewardhubError as exc:
        raise UsageError(f"reward.remote: {exc}") from None
    if not terms:
        raise UsageError(f"reward.remote: the server at {scorer.url} scores with no reward terms")
    scorer.http.retry_for_s = retry_for_s  # the run's own retries from here on
    return scorer


class RemoteScorer:
    """Scores on a ``rewardhub serve`` server: a :class:`~rewardhub.execution.Scorer`, with what the
    trainer's reward client reads of a pool of reward workers (``fingerprint``, ``workers_info``,
    ``last_pids``, ``restarts``, ``take_notes``).

    :param remote: the server's URL, or ``reward.remote`` with its timeouts.
    """

    cancels = False  # the server scores each request it was sent

    def __init__(self, remote: RemoteConfig | str) -> None:
        cfg = RemoteConfig(url=remote) if isinstance(remote, str) else remote
        self.url = check_url(cfg.url)
        token = os.environ.get(TOKEN_ENV) or None
        self.http = Retrying(self.url, timeout_s=cfg.timeout_s, connect_timeout_s=cfg.connect_timeout_s,
                             retry_for_s=cfg.retry_for_s,
                             headers={"Authorization": f"Bearer {token}"} if token else {})
        self.last_pids: list[int] = []
        self.restarts = 0
        self.rescored_samples = 0
        #: requests split in two because the server answered 413 (its limits unpublished or smaller)
        self.splits = 0
        self._info: dict[str, Any] | None = None
        self._max_rows: int | None = None

    def _json(self, answer: Answer, what: str) -> Any:
        """A 2xx answer's JSON; any other status is an error naming the server and its reason."""
        if not 200 <= answer.status < 300:
            reason = reason_of(answer.body)
            secrets = bearer_secrets(self.http.headers)  # redacted before it is cut
            if reason is not None:
                reason = redact(reason, secrets, TOKEN_LABEL)
            else:
                reason = redact(answer.body[:1000].decode("utf-8", "replace"), secrets, TOKEN_LABEL)[:200]
                reason = reason or "(no reason given)"
            hint = f" (set ${TOKEN_ENV})" if answer.status == 401 else ""
            raise RewardhubError(f"reward server {self.url}: {what} answered {answer.status}: {reason}{hint}")
        return json_of(answer.body, answer.content_type, self.url, what)

    def info(self) -> dict[str, Any]:
        """The server's terms, their provenance and its limits (``GET /info``), asked once."""
        if self._info is None:
            data = self._json(self.http.request("GET", "/info"), "GET /info")
            self._info = checked_info(data, self.url)
            self._max_rows = self._info.get("limits", {}).get("max_rows")
        return self._info

    @property
    def facts(self) -> tuple[TermFacts, ...]:
        """The server's terms, as its ``GET /info`` describes them."""
        return tuple(TermFacts.from_dict(t) for t in self.info().get("terms", []) if isinstance(t, dict))

    @property
    def aggregation(self) -> str:
        return str(self.info().get("aggregation") or "weighted_sum")

    def provenance(self) -> list[dict[str, Any]]:
        """The server's provenance of each term it scores with (``rewardhub score --summary-json``'s
        ``rewards``), each with ``remote``: its URL."""
        return [{**r, "remote": self.url} for r in self.info().get("rewards", []) if isinstance(r, Mapping)]

    def score(self, samples: Sequence[Mapping[str, Any]], progress: Callable[[int, int], None] | None = None,
              *, indices: Sequence[int] | None = None, defer_raise: bool = False, cancel: Any = None
              ) -> ScoreResult:
        """The server's scores of ``samples`` (JSON: values that are not JSON are sent as text), in as
        many requests as the server's limits ask for (``progress`` called after each); a group
        (:func:`~rewardhub.execution.group_key`) is never split between requests where the server scores
        with a group reward. The server applies its terms' ``on_failure`` itself (``defer_raise`` changes
        nothing there); ``cancel`` is not read: a request sent is scored.

        :param indices: each sample's label in messages (as :meth:`rewardhub.execution.Runner.score`'s):
            a server's error naming a sample by its place in the request names it by its label here.
        :raises RewardhubError: a sample, or a group, larger than one request may be.
        """
        terms = [f.name for f in self.facts]
        if not samples:
            return ScoreResult.from_rows([], terms)
        encoded = [_encoded(s) for s in samples]
        limits = self.info().get("limits", {})
        grouped = any(f.kind == "group" for f in self.facts)
        units = group_units(samples) if grouped else [[i] for i in range(len(samples))]
        rows: list[dict[str, Any]] = [{} for _ in samples]
        answered: list[int] = []
        try:
            for part in _parts(units, samples, encoded, self._max_rows, limits.get("max_body")):
                positions = [i for u in part for i in u]
                for k, (i, row) in enumerate(zip(positions, self._score_part(part, samples, encoded))):
                    rows[i] = _relabelled(row, k, i if indices is None else indices[i])
                answered += positions
                if progress is not None:
                    progress(len(answered), len(samples))
        except RewardhubError as exc:  # the rows answered before: the caller may keep them (``answered``)
            from ...scoring import RESULT_KEYS

            kept = {i: {k: rows[i][k] for k in RESULT_KEYS if k in rows[i]} for i in answered}
            exc.answered = kept  # type: ignore[attr-defined]
            raise
        self.last_pids = sorted({w["pid"] for r in self.provenance() for w in r.get("workers", [])
                                 if isinstance(w, Mapping) and isinstance(w.get("pid"), int)})
        return ScoreResult.from_rows(rows, terms)

    def _score_part(self, part: list[list[int]], samples: Sequence[Mapping[str, Any]], encoded: list[bytes]
                    ) -> list[dict[str, Any]]:
        """The answer rows of the units (groups, or single rows) in ``part``, in their order."""
        positions = [i for u in part for i in u]
        answer = self.http.request("POST", "/score", _body([encoded[i] for i in positions]))
        if answer.status == 413 and len(positions) > 1:  # over a limit the server did not publish: halve
            if len(part) == 1:
                raise RewardhubError(
                    f"reward server {self.url} refused {_group_of(samples, part[0])} ({len(positions)} rows) "
                    "as too large (413), and a group reward needs a group in one request\nstart `rewardhub "
                    "serve` with larger limits (--max-rows, --max-body-mb)")
            # cut after the first unit that ends past half the rows, but never after the last unit
            sizes = list(itertools.accumulate(map(len, part)))
            cut = next((k + 1 for k, n in enumerate(sizes[:-1]) if n >= len(positions) // 2), len(part) - 1)
            rows = sizes[cut - 1]
            self.splits += 1
            self._max_rows = rows if self._max_rows is None else min(self._max_rows, rows)
            print(f"WARNING: reward server {self.url} refused {len(positions)} rows as too large (413); "
                  f"sending at most {rows} rows per request", file=sys.stderr, flush=True)
            return (self._score_part(part[:cut], samples, encoded)
                    + self._score_part(part[cut:], samples, encoded))
        return checked_rows(self._json(answer, "POST /score"), self.url, positions)

    def fingerprint(self) -> str:
        return f"remote:{self.url}"

    def workers_info(self) -> list[dict[str, Any]]:
        return []

    def take_notes(self) -> list[str]:
        return []

    def pool_figures(self) -> list[dict[str, Any]]:
        return []  # the server's pools are its own (its --summary-json)

    def close(self) -> None:
        pass


#: bytes a body has besides its rows, and what a row's ``"index": N`` adds at most
_BODY_BYTES = len(b'{"rows":[]}')
_INDEX_BYTES = len(b',"index":') + 20


def _encoded(sample: Mapping[str, Any]) -> bytes:
    """A sample as a JSON object (values that are not JSON as text; a NaN or infinite float, which the
    server refuses, as null), without an ``index`` of its own."""
    row = {k: v for k, v in sample.items() if k != "index"}
    try:
        return json.dumps(row, default=str, allow_nan=False).encode("utf-8")
    except ValueError:  # rare: walk the sample only when it holds one (a data file's missing value)
        from ...scoring import nulls_for_non_finite

        return json.dumps(nulls_for_non_finite(row), default=str, allow_nan=False).encode("utf-8")


def _body(part: list[bytes]) -> bytes:
    """``{"rows": [...]}`` of encoded samples, each row with its ``index`` in the request, last (so that
    it is the one a JSON reader keeps)."""
    rows = [row[:-1] + (b"," if len(row) > 2 else b"") + b'"index":%d}' % i for i, row in enumerate(part)]
    return b'{"rows":[' + b",".join(rows) + b"]}"


def _relabelled(row: dict[str, Any], sent: int, label: int) -> dict[str, Any]:
    """``row`` with its errors naming its sample by ``label``, not by ``sent`` (its place in the request)."""
    errors = row.get("errors")
    if not isinstance(errors, Mapping) or not errors:
        return row
    import re

    from ...types import sample_name

    here = re.compile(rf"(?<![\w]){re.escape(f'sample {sent}')}(?!\d)")
    row["errors"] = {k: here.sub(lambda _: sample_name(label), v, count=1) if isinstance(v, str) else v
                     for k, v in errors.items()}
    return row


def _group_of(samples: Sequence[Mapping[str, Any]], unit: list[int]) -> str:
    from .. import group_name

    return f"sample {unit[0]}" if len(unit) == 1 else f"the group {group_name(samples[unit[0]])}"


def _parts(units: list[list[int]], samples: Sequence[Mapping[str, Any]], encoded: list[bytes],
           max_rows: int | None, max_body: int | None) -> list[list[list[int]]]:
    """``units`` (groups of positions, or single ones) packed into requests of at most ``max_rows``
    rows and ``max_body`` bytes; a unit is never cut.

    :raises RewardhubError: one unit alone is over a limit, naming it and the limit.
    """
    parts: list[list[list[int]]] = [[]]
    rows, size = 0, _BODY_BYTES
    for unit in units:
        grown = sum(len(encoded[i]) + _INDEX_BYTES + 1 for i in unit)
        if max_rows is not None and len(unit) > max_rows:
            raise RewardhubError(
                f"{_group_of(samples, unit)} has {len(unit)} rows, more than the reward server's limit of "
                f"{max_rows} rows per request, and a group reward needs a group in one request\n"
                "start `rewardhub serve` with a larger --max-rows"
            )
        if max_body is not None and _BODY_BYTES + grown > max_body:
            raise RewardhubError(
                f"{_group_of(samples, unit)} is {grown} bytes as JSON, more than the reward server's limit "
                f"of {max_body} bytes per request\nstart `rewardhub serve` with a larger --max-body-mb"
            )
        full = parts[-1] and (
            (max_rows is not None and rows + len(unit) > max_rows)
            or (max_body is not None and size + grown > max_body)
        )
        if full:
            parts.append([])
            rows, size = 0, _BODY_BYTES
        parts[-1].append(unit)
        rows += len(unit)
        size += grown
    return parts
