"""Rows in, rows out: the samples of a data file or a request scored into the rows ``rewardhub score``
writes; what ``score``, ``serve``, ``rewardhub test`` and verl's reward managers share.

A row's result is ``score``, ``rewards`` (term -> value), ``extra`` (term -> its extra metrics) and, when
a term failed, ``errors`` (term -> why). A row that cannot be given to the rewards (no ground truth that
a term needs, a verl field that could not be read) is *skipped*: ``score: null``, every term null, and
the reason as the error of each term concerned, counted as an error in that term's column.
"""

from __future__ import annotations

from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING
from typing import Any

from .errors import UsageError

if TYPE_CHECKING:
    from .execution import Scorer

__all__ = ["NO_GROUND_TRUTH", "RESULT_KEYS", "Scored", "check_result_fields", "missing_ground_truth",
           "nulls_for_non_finite", "output_row", "read_pairs", "score_rows"]

#: the fields a result adds to each row
RESULT_KEYS = ("score", "rewards", "extra", "errors", "error_kinds")
NO_GROUND_TRUTH = (
    "no ground truth in this row (ground_truth, or verl's reward_model.ground_truth), which this reward needs"
)


# ---- rows in -----------------------------------------------------------------------------------

def read_pairs(path: str, *, prompt_key: str | None = None,
               answer_key: str | None = None) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """``(input row, sample)`` for every row of ``path``: the row as read (what the output keeps, unchanged)
    and the sample the rewards get.

    :raises UsageError: a row without ``response`` or ``messages``, or a ``prompt_key`` /
        ``answer_key`` that names no column of the first row (naming the columns it has).
    """
    from .datasets import has_column
    from .datasets import iter_rows
    from .datasets import to_sample

    first = True
    for row in iter_rows(path, key="data"):
        sample = to_sample(row, prompt_key=prompt_key, answer_key=answer_key)
        if "response" not in sample and "messages" not in sample:
            raise UsageError(
                f"{row.where}: no 'response' column (nor 'messages', nor a verifiers trace in "
                "extra_info.trace)\n"
                "rows need response, and prompt, ground_truth (or verl's reward_model.ground_truth), "
                "data_source, extra_info; or a trajectory: messages (OpenAI chat format) in place of "
                "prompt and response"
            )
        if first:
            first = False
            for flag, key in (("--prompt-key", prompt_key), ("--answer-key", answer_key)):
                if key and not has_column(row.data, key):
                    raise UsageError(f"{flag} {key!r}: {row.where} has no such column\n"
                                     f"its columns are: {_columns(row.data)}")
        yield row.data, sample


def _columns(data: dict[str, Any], shown: int = 40) -> str:
    """The row's columns, nested ones dotted (``reward_model.ground_truth``); the first ``shown`` of them."""
    names: list[str] = []

    def walk(node: dict[str, Any], prefix: str) -> None:
        for k, v in node.items():
            names.append(f"{prefix}{k}")
            if isinstance(v, dict) and len(names) <= shown:
                walk(v, f"{prefix}{k}.")

    walk(data, "")
    more = f", ... ({len(names)} in all)" if len(names) > shown else ""
    return (", ".join(names[:shown]) or "(none)") + more


def check_result_fields(
    chunk: Sequence[Mapping[str, Any]], offset: int, data: str, namespace: str | None = None
) -> None:
    """Refuse input rows that have a field a result would overwrite: one of :data:`RESULT_KEYS`, or the
    ``--namespace`` key."""
    for i, row in enumerate(chunk):
        if namespace:
            if namespace in row:
                raise UsageError(
                    f"{data}: row {offset + i + 1} has a field {namespace!r}, the --namespace score "
                    "writes its results to\npass another --namespace NAME"
                )
            continue
        key = next((k for k in RESULT_KEYS if k in row), None)
        if key is not None:
            raise UsageError(
                f"{data}: row {offset + i + 1} has a field {key!r}, which score writes its results to\n"
                "pass --namespace NAME to write the results under one key of each row "
                "(e.g. --namespace rewardhub), or rename the field"
            )


def missing_ground_truth(samples: Sequence[Mapping[str, Any]], needing: Sequence[str],
                         why: str = NO_GROUND_TRUTH) -> dict[int, dict[str, str]]:
    """The rows to skip for want of a ground truth (``None``) that the terms in ``needing`` take, each
    with those terms' error (``why``)."""
    if not needing:
        return {}
    return {i: dict.fromkeys(needing, why) for i, s in enumerate(samples) if s.get("ground_truth") is None}


# ---- scoring -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Scored:
    """What :func:`score_rows` gives: each row's result, in row order, and each term's ``Column``: the
    rows given to the rewards first, then the skipped ones (``position[i]``: row ``i``'s place there)."""

    results: list[dict[str, Any]]
    columns: dict[str, Any]
    position: list[int]
    #: the rows not given to the rewards
    skipped: frozenset[int] = frozenset()

    @property
    def scores(self) -> list[float | None]:
        return [r["score"] for r in self.results]


def score_rows(scorer: Scorer, samples: Sequence[Any], skip: Mapping[int, Mapping[str, str]] | None = None, *,
               progress: Any = None, indices: Sequence[int] | None = None,
               defer_raise: bool = False) -> Scored:
    """Score ``samples`` with ``scorer``, but not the rows in ``skip`` (row -> {term: error}), which are
    never given to the rewards (see the module's text).

    :param indices: each sample's number in error messages (its position in its own request).
    :param defer_raise: see :meth:`rewardhub.execution.Runner.score`.
    """
    from .execution import ERROR
    from .execution import Column

    skip = skip or {}
    ok = [i for i in range(len(samples)) if i not in skip]
    res = None
    if ok or not skip:
        given = samples if not skip else [samples[i] for i in ok]
        res = scorer.score(given, progress, defer_raise=defer_raise,
                           indices=indices if not skip or indices is None else [indices[i] for i in ok])
        if not skip:
            return Scored([_row_result(res, i) for i in range(len(samples))], dict(res.columns),
                          list(range(len(samples))))
    gone = sorted(skip)
    position = [0] * len(samples)
    for k, i in enumerate(ok + gone):
        position[i] = k
    names = [f.name for f in scorer.facts]
    columns: dict[str, Any] = {}
    for n in names:
        col = Column(0)
        if res is not None:
            col.extend(res.columns[n])
        extra = Column(len(gone))
        for j, i in enumerate(gone):
            if n in skip[i]:
                extra.fail(j, ERROR, skip[i][n], 0.0)
            else:
                extra.not_applicable([j])
        col.extend(extra)
        col.labels = ok + gone  # rows of ``samples``
        columns[n] = col
    results = [_row_result(res, position[i]) if i not in skip else
               {"score": None, "rewards": dict.fromkeys(names), "extra": {}, "errors": dict(skip[i]),
                "error_kinds": dict.fromkeys(skip[i], ERROR)}
               for i in range(len(samples))]
    return Scored(results, columns, position, frozenset(skip))


def _row_result(res: Any, k: int) -> dict[str, Any]:
    """Row ``k``'s result in a ``ScoreResult``: score, rewards, extra (and errors with their kinds)."""
    out = {"score": res.scores[k], "rewards": res.rewards[k], "extra": res.extra[k]}
    if res.errors[k]:
        out["errors"], out["error_kinds"] = res.errors[k], res.error_kinds[k]
    return out


# ---- rows out ----------------------------------------------------------------------------------

def output_row(sample: Mapping[str, Any], result: Mapping[str, Any], namespace: str | None = None
               ) -> dict[str, Any]:
    """The input row plus its result (:func:`score_rows`), at the top level or under ``namespace``."""
    return {**sample, namespace: dict(result)} if namespace else {**sample, **result}


def nulls_for_non_finite(value: Any) -> Any:
    """``value`` with every NaN or infinite float made null (JSON has no NaN; a run where every row
    failed has no mean)."""
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else None
    if isinstance(value, Mapping):
        return {k: nulls_for_non_finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [nulls_for_non_finite(v) for v in value]
    return value
