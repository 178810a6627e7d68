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

__all__ = ["NO_GROUND_TRUTH", "RESULT_KEYS", "GroupChunks", "Scored", "check_result_fields", "group_units",
           "has_group_terms", "missing_ground_truth", "nulls_for_non_finite", "output_row", "read_pairs",
           "score_rows", "scored_before_stop"]

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


# ---- whole groups ------------------------------------------------------------------------------

def has_group_terms(scorer: Scorer) -> bool:
    """Whether a term of ``scorer`` is a group reward (``kind: group``), which must see whole groups."""
    return any(f.kind == "group" for f in scorer.facts)


def group_units(samples: Sequence[Mapping[str, Any]]) -> list[list[int]]:
    """The positions of ``samples`` by group (:func:`~rewardhub.execution.group_key`), each group in the
    order of its first row: the units a batch may be cut into without cutting a group."""
    from .execution import group_key

    by: dict[str, list[int]] = {}
    for i, s in enumerate(samples):
        by.setdefault(_key_of(group_key, s), []).append(i)
    return list(by.values())


def _key_of(group_key: Any, sample: Any) -> str:
    return group_key(sample) if isinstance(sample, Mapping) else f"<row {id(sample)}>"


class GroupChunks:
    """Rows taken from a stream in chunks; with ``whole_groups``, a chunk never ends inside a group: it
    goes on while the next row is of its last row's group (the rows of a group must follow each other,
    as GRPO rollouts and verl's batches have them).

    ``items`` yields ``(row, sample)`` pairs (:func:`read_pairs`).

    :raises UsageError: (from :meth:`take`) a row of a group whose rows came in an earlier chunk (a group
        cut by rows of other groups, and too far apart to be scored together), naming the group and row.
    """

    def __init__(self, items: Any, whole_groups: bool, data: str = "the data") -> None:
        self._rest = iter(items)
        self._next: Any = None
        self.whole_groups = whole_groups
        self.data = data
        self._seen: dict[bytes, int] = {}  # a digest of each group's key -> the row (1-based) it began at
        self.rows = 0  # rows taken so far

    def take(self, size: int) -> list[Any]:
        import itertools

        head = [] if self._next is None else [self._next]
        self._next = None
        chunk = head + list(itertools.islice(self._rest, size - len(head)))
        if self.whole_groups and chunk:
            from .execution import group_key

            last = _key_of(group_key, chunk[-1][1])
            for item in self._rest:
                if _key_of(group_key, item[1]) != last:
                    self._next = item
                    break
                chunk.append(item)
            self._check(chunk, group_key)
        self.rows += len(chunk)
        return chunk

    def _check(self, chunk: list[Any], group_key: Any) -> None:
        import hashlib

        from .execution import group_name

        mine: dict[bytes, int] = {}
        for k, (_, sample) in enumerate(chunk):
            digest = hashlib.blake2b(_key_of(group_key, sample).encode("utf-8", "replace"),
                                     digest_size=16).digest()
            began = self._seen.get(digest)
            if began is not None:
                raise UsageError(
                    f"{self.data}: row {self.rows + k + 1} is of {group_name(sample)}, whose rows began at "
                    f"row {began} and were scored before rows of other groups came in between; a group "
                    "reward needs a group's rows together\nsort the rows by group (uid) so that each "
                    "group's rows follow each other"
                )
            mine.setdefault(digest, self.rows + k + 1)
        self._seen.update(mine)


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
               defer_raise: bool = False, cancel: Any = None) -> Scored:
    """Score ``samples`` with ``scorer``, but not the rows in ``skip`` (row -> {term: error}), which are
    never given to the rewards (see the module's text).

    :param indices: each sample's number in error messages (its position in its own request).
    :param defer_raise: see :meth:`rewardhub.execution.Runner.score`.
    :param cancel: see :meth:`rewardhub.execution.Runner.score`.
    """
    from .execution import ERROR
    from .execution import Column

    skip = skip or {}
    ok = [i for i in range(len(samples)) if i not in skip]
    res = None
    if ok or not skip:
        given = samples if not skip else [samples[i] for i in ok]
        res = scorer.score(given, progress, defer_raise=defer_raise, cancel=cancel,
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


def scored_before_stop(scorer: Scorer, n: int, skip: Mapping[int, Mapping[str, str]] | None,
                       kept: Mapping[str, Any] | None) -> list[tuple[int, dict[str, Any]]]:
    """The rows of a :func:`score_rows` call that stopped (its ``cancel`` set) that every term had scored
    when it stopped, each with its result (in row order): what was paid for, to keep.

    :param n: the rows given to :func:`score_rows`; ``skip`` as given to it.
    :param kept: the terms' columns where the scoring stopped (``Cancel.kept``).
    """
    from .execution import CANCELLED
    from .execution import Column
    from .execution import combine

    skip = skip or {}
    ok = [i for i in range(n) if i not in skip]
    names = [f.name for f in scorer.facts]
    if kept is None or any(name not in kept for name in names):
        return []
    cols = [kept[name] for name in names]
    done = [k for k in range(len(ok))
            if all(k < len(c) and CANCELLED not in (c.errors.get(k) or "") for c in cols)]
    subset: dict[str, Any] = {}
    for name, col in zip(names, cols):
        outs = col.outcomes()
        subset[name] = Column.from_outcomes([outs[k] for k in done])
    res = combine([(f.name, f.weight) for f in scorer.facts], scorer.aggregation, len(done), subset)
    out = [(ok[k], _row_result(res, j)) for j, k in enumerate(done)]
    last = ok[done[-1]] if done else -1
    out += [(i, {"score": None, "rewards": dict.fromkeys(names), "extra": {}, "errors": dict(skip[i]),
                 "error_kinds": dict.fromkeys(skip[i], "error")}) for i in skip if i < last]
    return sorted(out, key=lambda x: x[0])


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
