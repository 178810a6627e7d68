"""Request and answer formats: the server's own (``POST /score``) and OpenRLHF's (``POST /get_reward``).

Own API: ``{"rows": [ROW, ...]}`` where a row is what a line of ``rewardhub score``'s input holds
(``response``, or ``messages`` for a trajectory; ``prompt``, ``ground_truth`` or verl's
``reward_model.ground_truth``, ``data_source``, ``extra_info``); the answer is ``{"rows": [...]}``,
each the line ``rewardhub score`` writes for that row (the input row plus ``score``, ``rewards``,
``extra`` and, when a term failed, ``errors``).

OpenRLHF (0.11's ``SingleTurnAgentExecutor._fetch_rewards_via_http``, with ``--reward.remote_url
http://HOST:PORT/get_reward``): ``{"query": [...], "prompts": [...], "labels": [...]}`` where a query
is the decoded prompt + response; the response is the query after its prompt, with the end texts
OpenRLHF's decode leaves on it (``<|im_end|>``, pads: :mod:`._endtext`) stripped from its end; a
query that does not start with its prompt is scored whole (and counted: ``prompt_not_prefix``); a
query that is a list of chat messages is a trajectory (an agent's episode). The label is the ground
truth. The answer is ``{"rewards": [...], "scores": [...], "extra_logs": {TERM: [...],
"rewardhub_failed": [...]}}``, one value per query.

A failed row's reward follows its terms' ``on_failure`` as far as JSON goes: ``zero`` gives 0.0;
``nan`` (the default) and ``drop`` give ``null`` (JSON has no NaN, and a failure is never a score);
``raise`` fails the request (500). OpenRLHF turns every value into a tensor, so it stops at a ``null``
reward rather than train on a made-up number: give the terms ``on_failure: zero`` where a failure
should score 0.0 there. ``extra_logs`` holds only numbers (OpenRLHF logs each as a tensor): each
term's value, 0.0 where the term failed or did not apply, and ``rewardhub_failed``, 1.0 for a row
where some term failed (its ``errors``), else 0.0.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from collections.abc import Mapping
from typing import Any

from ..errors import TOO_LARGE
from ..errors import UsageError

__all__ = ["openrlhf_answer", "openrlhf_rows", "own_rows"]


def own_rows(body: Any, max_rows: int) -> list[dict[str, Any]]:
    """The scoring samples of a ``/score`` body, as ``rewardhub score`` reads a data file's rows.

    :raises UsageError: the reason, naming the row (the handler answers 400 or 413).
    """
    from ..datasets import Row
    from ..datasets import to_sample
    from ..scoring import check_result_fields

    if isinstance(body, list):
        rows = body
    elif isinstance(body, Mapping) and isinstance(body.get("rows"), list):
        rows = body["rows"]
    else:
        raise UsageError(
            'the body must be {"rows": [ROW, ...]} (or a JSON list of rows), each row an object '
            'with "response" and optionally "prompt", "ground_truth", "data_source", "extra_info"'
        )
    _check_count(len(rows), max_rows)
    out = []
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise UsageError(f"rows[{i}] is a {type(row).__name__}, not an object with 'response'")
        if "response" not in row and isinstance(row.get("messages"), list):
            pass  # a trajectory: its messages stand for prompt and response (rewardhub.trajectory)
        elif not isinstance(row.get("response"), str):
            raise UsageError(f"rows[{i}] has no 'response' string (nor 'messages', a trajectory)"
                             if "response" not in row
                             else f"rows[{i}].response is a {type(row['response']).__name__}, not a string")
        if row.get("extra_info") is not None and not isinstance(row["extra_info"], Mapping):
            raise UsageError(f"rows[{i}].extra_info is a {type(row['extra_info']).__name__}, not an object")
        out.append(to_sample(Row("request", i + 1, dict(row))))
    try:
        check_result_fields(out, 0, "request")
    except UsageError as exc:
        raise UsageError(str(exc).split("\n")[0] + "; rename the field") from None
    return out


def openrlhf_rows(
    body: Any, max_rows: int, trim: Callable[[str], str] | None = None
) -> tuple[list[dict[str, Any]], int]:
    """The scoring samples of an OpenRLHF ``/get_reward`` body, and how many of its queries do not
    start with their prompt (each scored whole, prompt included).

    :param trim: takes the end texts off a response (:class:`._endtext.EndTrimmer`).
    """
    if not isinstance(body, Mapping) or not isinstance(body.get("query"), list):
        raise UsageError('the body must be {"query": [TEXT, ...], "prompts": [TEXT, ...], "labels": [...]} '
                         "(OpenRLHF's remote reward model request)")
    queries = body["query"]
    _check_count(len(queries), max_rows)
    prompts = body.get("prompts")
    labels = body.get("labels")
    for key, values in (("prompts", prompts), ("labels", labels)):
        if values is not None and (not isinstance(values, list) or len(values) != len(queries)):
            raise UsageError(f"{key!r} must be a list as long as 'query' ({len(queries)} items)")
    out: list[dict[str, Any]] = []
    not_prefix = 0
    for i, query in enumerate(queries):
        if isinstance(query, list):  # a trajectory: the episode's chat messages (rewardhub.trajectory)
            out.append({"messages": query, "ground_truth": labels[i] if labels is not None else None,
                        "data_source": None, "extra_info": {}})
            continue
        if not isinstance(query, str):
            raise UsageError(f"query[{i}] is a {type(query).__name__}, not a string (or a list of chat "
                             "messages)")
        prompt = prompts[i] if prompts is not None else None
        if prompt is not None and not isinstance(prompt, str):
            raise UsageError(f"prompts[{i}] is a {type(prompt).__name__}, not a string")
        if prompt and query.startswith(prompt):
            response = query[len(prompt):]
        else:
            response = query
            not_prefix += bool(prompt)
        if trim is not None:
            response = trim(response)
        out.append({"prompt": prompt, "response": response,
                    "ground_truth": labels[i] if labels is not None else None,
                    "data_source": None, "extra_info": {}})
    return out, not_prefix


#: the ``extra_logs`` key that flags a row where some term failed (1.0) or none did (0.0)
FAILED_LOG = "rewardhub_failed"


def openrlhf_answer(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """OpenRLHF's answer for scored rows: ``rewards`` and ``scores`` (the same values; ``null`` for a
    failed row) and ``extra_logs`` (numbers only: each term's value, 0.0 where it failed or did not
    apply, and :data:`FAILED_LOG`)."""
    scores = [_finite_or_none(r.get("score")) for r in rows]
    terms: dict[str, list[float]] = {}
    for r in rows:
        for name in r.get("rewards") or {}:
            terms.setdefault(name, [])
    for name, values in terms.items():
        for r in rows:
            values.append(_finite_or_none((r.get("rewards") or {}).get(name)) or 0.0)
    logs: dict[str, list[float]] = {**terms, FAILED_LOG: [1.0 if r.get("errors") else 0.0 for r in rows]}
    return {"rewards": scores, "scores": scores, "extra_logs": logs}


def _finite_or_none(v: Any) -> float | None:
    if v is None:
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def _check_count(n: int, max_rows: int) -> None:
    if n == 0:
        raise UsageError("the request has no rows")
    if n > max_rows:
        raise UsageError(f"the request has {n} rows, more than this server's limit of {max_rows}\n"
                         "send smaller batches, or start the server with a larger --max-rows", kind=TOO_LARGE)
