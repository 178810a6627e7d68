"""The server's counters, rendered as Prometheus text (exposition format 0.0.4).

Per reward term: samples scored, errors, timeouts, and a latency histogram (seconds per call);
per endpoint: requests by status code; batches and the rows they held. Only the event loop's
thread updates them (the batcher records a finished batch there), so no lock is needed.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

__all__ = ["LATENCY_BUCKETS", "ServerMetrics"]

#: upper bounds of the latency histogram, seconds
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class _Histogram:
    __slots__ = ("counts", "total", "n")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS) + 1)
        self.total = 0.0
        self.n = 0

    def add(self, x: float) -> None:
        self.counts[bisect.bisect_left(LATENCY_BUCKETS, x)] += 1
        self.total += x
        self.n += 1


class _Term:
    __slots__ = ("samples", "errors", "timeouts", "not_applicable", "latency")

    def __init__(self) -> None:
        self.samples = self.errors = self.timeouts = self.not_applicable = 0
        self.latency = _Histogram()


class ServerMetrics:
    """What ``/metrics`` reports."""

    def __init__(self, terms: Sequence[str]) -> None:
        self.terms = {name: _Term() for name in terms}
        self.requests: dict[tuple[str, int], int] = {}
        self.batches = 0
        self.rows = 0
        self.inflight = 0
        #: Runner calls running now (at most the batcher's max_calls)
        self.calls = 0
        self.batch_failures = 0
        #: /get_reward queries that did not start with their prompt (scored whole, prompt included)
        self.prompt_not_prefix = 0
        #: connections the server closed, by reason (``header_timeout``, ``limit``), and those open
        self.connections_closed: dict[str, int] = {}
        self.open_connections = 0

    def request(self, endpoint: str, status: int) -> None:
        key = (endpoint, status)
        self.requests[key] = self.requests.get(key, 0) + 1

    def batch(self, rows: int, columns: Mapping[str, Any]) -> None:
        """A scored batch: ``columns`` are the Runner's per-term columns (status, latency per sample)."""
        from ..execution import ERROR
        from ..execution import NOT_APPLICABLE
        from ..execution import TIMEOUT

        self.batches += 1
        self.rows += rows
        for name, col in columns.items():
            t = self.terms.setdefault(name, _Term())
            status = col.status
            latency = col.latency
            for i in range(len(col)):
                s = status.get(i)
                if s == NOT_APPLICABLE:
                    t.not_applicable += 1
                    continue
                t.samples += 1
                if s == ERROR:
                    t.errors += 1
                elif s == TIMEOUT:
                    t.timeouts += 1
                t.latency.add(float(latency[i]))

    def render(self) -> str:
        """The Prometheus text exposition of every counter."""
        out: list[str] = []

        def family(name: str, kind: str, help_: str) -> None:
            out.append(f"# HELP {name} {help_}")
            out.append(f"# TYPE {name} {kind}")

        family("rewardhub_requests_total", "counter", "HTTP requests by endpoint and status code")
        for (endpoint, code), n in sorted(self.requests.items()):
            out.append(f'rewardhub_requests_total{{endpoint="{_esc(endpoint)}",code="{code}"}} {n}')
        for name, kind, help_, value in (
            ("rewardhub_inflight_requests", "gauge", "requests being scored now", self.inflight),
            ("rewardhub_inflight_batches", "gauge", "Runner calls running now (at most --max-calls)",
             self.calls),
            ("rewardhub_rows_total", "counter", "rows scored", self.rows),
            ("rewardhub_batches_total", "counter", "Runner calls (each pools the requests that were waiting)",
             self.batches),
            ("rewardhub_batch_failures_total", "counter",
             "requests failed by a reward's on_failure: raise (or by a Runner call that raised)",
             self.batch_failures),
            ("rewardhub_open_connections", "gauge", "client connections open now", self.open_connections),
            ("rewardhub_prompt_not_prefix_total", "counter",
             "/get_reward queries that do not start with their prompt (scored whole, prompt included)",
             self.prompt_not_prefix),
        ):
            family(name, kind, help_)
            out.append(f"{name} {value}")
        family("rewardhub_connections_closed_total", "counter",
               "connections closed before they sent a request's headers (header_timeout: within "
               "--read-timeout; limit: to make room at the connection limit; bad_request: a request "
               "head that could not be read, answered 400)")
        for reason, n in sorted(self.connections_closed.items()):
            out.append(f'rewardhub_connections_closed_total{{reason="{_esc(reason)}"}} {n}')
        for metric, attr, help_ in (
            ("rewardhub_reward_samples_total", "samples", "samples given to the reward term"),
            ("rewardhub_reward_errors_total", "errors", "calls that raised or returned no valid score"),
            ("rewardhub_reward_timeouts_total", "timeouts", "calls stopped at the term's timeout_s"),
            ("rewardhub_reward_not_applicable_total", "not_applicable", "samples routed away from the term"),
        ):
            family(metric, "counter", help_)
            for name, t in sorted(self.terms.items()):
                out.append(f'{metric}{{reward="{_esc(name)}"}} {getattr(t, attr)}')
        family("rewardhub_reward_latency_seconds", "histogram", "seconds per reward call")
        for name, t in sorted(self.terms.items()):
            h, label = t.latency, f'reward="{_esc(name)}"'
            cum = 0
            for bound, n in zip((*LATENCY_BUCKETS, math.inf), h.counts):
                cum += n
                le = "+Inf" if bound == math.inf else repr(bound)
                out.append(f'rewardhub_reward_latency_seconds_bucket{{{label},le="{le}"}} {cum}')
            out.append(f"rewardhub_reward_latency_seconds_sum{{{label}}} {h.total!r}")
            out.append(f"rewardhub_reward_latency_seconds_count{{{label}}} {h.n}")
        return "\n".join(out) + "\n"


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
