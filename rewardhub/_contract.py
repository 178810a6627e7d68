"""The reward contract that ``rewardhub test`` (and :func:`rewardhub.testing.check_reward`) checks.

For each term of a ``reward:`` section, on the given rows plus four edge responses (empty, very
long, non-ASCII, malformed) made from the first row:

- ``survives its calls``: no call ends the process it runs in (``os._exit``, a crash, a signal): every
  term runs on the process executor first, and one that ended a worker fails and is not run inline;
- ``returns a score``: every data row gets a finite score, or ``None`` ("not applicable"): the
  declared types (a float, a dict with ``score``, a list for a batched reward) are what the Runner
  accepts; anything else, or a raise, fails;
- ``applies to a row``: the reward scored at least one data row (one routed to other data sources,
  or that returns ``None`` for every row, was never tested: a failure);
- ``edge responses``: no raise on the edge responses (a score or ``None`` is fine);
- ``under timeout``: every call ends within the term's ``timeout_s`` (its declared one, else the
  contract's default); the calls run under that timeout, so a hanging reward fails, never hangs;
- ``deterministic``: two calls on the same rows give the same scores (a failure when the reward is
  declared ``pure``; reported otherwise);
- ``same on every executor``: inline, process and ray give the same scores; ray (which starts a local
  Ray, seconds) only when asked or when a term declares ``executor: ray``, and only where it is installed.

Every run scores with ``on_failure: nan`` so that a failure stays visible as a status (never a
score) whatever the term declares.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
from collections.abc import Collection
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["EDGE_RESPONSES", "Check", "DEFAULT_ROWS", "EXECUTORS", "run_contract"]

#: the edge responses every reward must survive
EDGE_RESPONSES: dict[str, str] = {
    "empty": "",
    "very long": ("The answer is 42. " * 6000)[:100_000],
    "non-ASCII": "Die Antwort ist ４２ — 答え: 四十二 🤖 \u202eevil\u202c ∑ √2 ÷ ½",
    "malformed": "\\boxed{ {{ ``` <think> </answer> \x00 \\frac{1}{ ))] \ufffd",
}

#: rows used when the author gives none: a question, a right and a wrong answer
DEFAULT_ROWS: list[dict[str, Any]] = [
    {"prompt": "What is 6 * 7?", "response": "6 * 7 = 42. The answer is \\boxed{42}.", "ground_truth": "42",
     "data_source": None, "extra_info": {}},
    {"prompt": "What is 6 * 7?", "response": "I think it is 41.", "ground_truth": "42",
     "data_source": None, "extra_info": {}},
    {"prompt": "Name a prime number.", "response": "<think>2 is prime.</think><answer>2</answer>",
     "ground_truth": "2", "data_source": None, "extra_info": {}},
]

EXECUTORS = ("inline", "process", "ray")
PASS, FAIL, SKIP = "pass", "FAIL", "skip"


@dataclass(frozen=True)
class Check:
    """One contract of one term: ``status`` pass | FAIL | skip, and what was seen."""

    term: str
    contract: str
    status: str
    detail: str
    #: for a failed call: the last frames of the reward's own code where it raised ("" otherwise)
    where: str = ""


def run_contract(reward_cfg: Any, rows: Sequence[Mapping[str, Any]] | None = None, *,
                 executors: Sequence[str] | None = None, default_timeout_s: float = 10.0) -> list[Check]:
    """Check every term of ``reward_cfg`` (a ``reward:`` section); the checks in term order.

    :param executors: those compared; ``None``: inline and process, and ray when a term declares it.
    """
    from .config.schema import validate_reward

    probe = _Probe.build(validate_reward(reward_cfg), rows or DEFAULT_ROWS, default_timeout_s)
    # a call that ends its process (os._exit, a crash, a signal) would end this one on the inline
    # executor: every term runs on the process executor first, and one that ended a worker fails
    # `survives its calls` and is not run again
    exited, probed = _ending_terms(probe)
    out = [_survival(name, exited.get(name), probed.get(name), len(probe.batch)) for name in probe.names]
    probe = probe.without(exited)
    if not probe.names:
        return out
    scores = _Scores.collect(probe, executors)
    for name in probe.names:
        out.extend(contract(probe, scores, name) for contract in PER_TERM)
    return out


@dataclass(frozen=True)
class _Probe:
    """The rows a contract run scores (the data rows, then the edge responses) and how it scores them."""

    section: Any
    #: term name -> (declared timeout_s, pure, executor, invoker kind), in term order
    declared: dict[str, tuple[float | None, bool, str, str]]
    #: term name -> the timeout its calls run under (its declared one, else the contract's default)
    timeouts: dict[str, float]
    #: term name -> its data_source routing, as the Runner describes it ("" when not routed)
    routes: dict[str, str]
    #: the data rows, then the edge responses
    batch: list[dict[str, Any]]
    #: the edge response's label of each row after the data rows
    labels: list[str]
    #: how many data sources the edge responses were made for
    n_sources: int
    #: per run on the process executor: how many of its workers died
    crashes: list[int] = dataclasses.field(default_factory=list)

    @classmethod
    def build(cls, section: Any, rows: Sequence[Mapping[str, Any]], default_timeout_s: float) -> _Probe:
        from .execution import Runner

        data = [dict(r) for r in rows]
        # the edge responses on the first row of each data source (a reward routed by data_source sees them)
        firsts = list({repr(r.get("data_source")): r for r in reversed(data)}.values())[::-1]
        with Runner.from_config(section) as runner:
            terms = {t.name: t for t in runner.terms}
        declared = {name: (t.policy.timeout_s, t.policy.pure, t.policy.executor, t.invoker.kind)
                    for name, t in terms.items()}
        return cls(section, declared, {name: d[0] or default_timeout_s for name, d in declared.items()},
                   {name: t.routes for name, t in terms.items()},
                   data + [{**row, "response": text} for text in EDGE_RESPONSES.values() for row in firsts],
                   [label for label in EDGE_RESPONSES for _ in firsts], len(firsts))

    @property
    def names(self) -> list[str]:
        return list(self.declared)

    @property
    def n_data(self) -> int:
        return len(self.batch) - len(self.labels)

    def without(self, names: Collection[str]) -> _Probe:
        """This probe less the terms in ``names``."""
        if not names:
            return self
        keep = [n not in names for n in self.names]
        section = dataclasses.replace(self.section, rewards=tuple(
            t for t, k in zip(self.section.rewards, keep) if k))
        return dataclasses.replace(self, section=section,
                                   declared={n: d for n, d in self.declared.items() if n not in names})

    def run(self, executor: str | None, keep: Sequence[int] | None = None,
            only: Collection[str] | None = None) -> dict[str, Any]:
        """Each term's column on the batch (only the rows in ``keep``: the others are ``None``), every
        term (or those in ``only``) on ``executor`` (``None``: as declared) under its timeout (inline:
        none; it cannot stop one)."""
        from .distributed import runner_from_config
        from .execution import Column

        rows = self.batch if keep is None else [self.batch[i] for i in keep]
        with runner_from_config(self._config(executor, only)) as runner:
            cols = runner.score(rows).columns if rows else {}
            self.crashes.append(runner.worker_crashes)
        if keep is None:
            return dict(cols)
        full = {n: Column(len(self.batch)) for n in self.names}
        for n, col in cols.items():
            for j, i in enumerate(keep):
                full[n].values[i] = col.values[j]
        return full

    def _config(self, executor: str | None, only: Collection[str] | None) -> Any:
        """The section to score with: ``on_failure: nan``, the contract's timeouts, on ``executor``."""
        rewards = tuple(dataclasses.replace(term, on_failure="nan",
                                            timeout_s=None if executor == "inline" else self.timeouts[name],
                                            executor=executor if executor is not None else term.executor)
                        for term, name in zip(self.section.rewards, self.names)
                        if only is None or name in only)
        cfg = dataclasses.replace(self.section, rewards=rewards)
        if executor == "ray":
            cfg = dataclasses.replace(
                cfg, workers=dataclasses.replace(cfg.workers, num_workers=max(1, cfg.workers.num_workers))
            )
        return cfg


@dataclass(frozen=True)
class _Scores:
    """What the checks after ``survives its calls`` read: two runs as declared and one per executor."""

    first: dict[str, Any]
    second: dict[str, Any]
    #: executor -> its columns, or the exception it raised
    others: dict[str, Any]
    #: the rows on which some call timed out (not run again: ``second`` and ``others`` skip them)
    hung: set[int]
    #: the executors asked for that are not installed
    skipped: list[str]
    #: ``["ray"]`` when the executors were left to the contract and no term declares ray
    unasked: list[str]
    #: the terms seen returning a Python bool (in this process: inline, thread and async runs)
    bools: set[str] = dataclasses.field(default_factory=set)

    @classmethod
    def collect(cls, probe: _Probe, executors: Sequence[str] | None) -> _Scores:
        from .execution import noting_bools

        auto = executors is None
        if executors is None:
            declared = {d[2] for d in probe.declared.values()}
            executors = [ex for ex in EXECUTORS if ex != "ray" or ex in declared]

        with noting_bools() as bools:
            # a row that timed out is not run again: it would cost a whole timeout each time
            first = probe.run(None)
            hung = _timed_out(probe, first)
            second = probe.run(None, [i for i in range(len(probe.batch)) if i not in hung])
            hung |= _timed_out(probe, second)
            keep = [i for i in range(len(probe.batch)) if i not in hung]
            others = {ex: _try(lambda ex=ex: probe.run(ex, keep))
                      for ex in executors if ex != "ray" or importlib.util.find_spec("ray") is not None}
        return cls(first, second, others, hung, [ex for ex in executors if ex not in others],
                   [ex for ex in EXECUTORS if auto and ex not in executors], bools)


def _timed_out(probe: _Probe, cols: dict[str, Any]) -> set[int]:
    from .execution import TIMEOUT

    return {i for col in cols.values() for i in range(len(probe.batch)) if col.status.get(i) == TIMEOUT}


def _returns_score(probe: _Probe, scores: _Scores, name: str) -> Check:
    """``returns a score``: every data row gets a finite score or ``None``."""
    from .execution import ERROR

    col, n = scores.first[name], probe.n_data
    errs = [(i, col.errors.get(i, "")) for i in range(n) if col.status.get(i) == ERROR]
    if errs:
        return Check(name, "returns a score", FAIL, f"{len(errs)} of {n} rows failed; first: {errs[0][1]}",
                     col.where.get(errs[0][0], ""))
    if name in scores.bools:  # scored 1.0 / 0.0, where numpy's bool_ is an error: both are reported
        return Check(name, "returns a score", FAIL, "returned a bool (True/False), not a number: return "
                     "float(...) (score reads a Python bool as 1.0 / 0.0, and numpy's bool_ as an error)")
    return Check(name, "returns a score", PASS,
                 f"{n} rows: " + ", ".join(map(_fmt, col.values[:min(n, 6)])) + (" ..." if n > 6 else ""))


def _applies(probe: _Probe, scores: _Scores, name: str) -> Check:
    """``applies to a row``: a reward that scored none of the data rows was never tested."""
    from .execution import NOT_APPLICABLE

    col, n_data, routes = scores.first[name], probe.n_data, probe.routes[name]
    skipped = [i for i in range(n_data) if col.status.get(i) == NOT_APPLICABLE]
    if len(skipped) < n_data:
        return Check(name, "applies to a row", PASS, f"scored {n_data - len(skipped)} of {n_data} rows")
    if routes:
        why = (f"never called: it is routed to {routes}, and none of the {n_data} rows matched; give rows "
               "with a matching data_source (rewardhub test REWARD rows.jsonl), or test a config whose term "
               "turns routing off (data_sources: [])")
    else:
        why = (f"returned None (not applicable) for all {n_data} rows, so no score was tested; give rows "
               "it applies to (rewardhub test REWARD rows.jsonl)")
    return Check(name, "applies to a row", FAIL, why)


def _edge_responses(probe: _Probe, scores: _Scores, name: str) -> Check:
    """``edge responses``: no raise on the edge responses."""
    from .execution import ERROR

    col, n = scores.first[name], probe.n_data
    bad = [k for k in range(len(probe.labels)) if col.status.get(n + k) == ERROR]
    if bad:
        detail = "; ".join(f"{probe.labels[k]}: {col.errors.get(n + k, '')}" for k in bad[:4])
        return Check(name, "edge responses", FAIL, detail + (" ..." if len(bad) > 4 else ""),
                     col.where.get(n + bad[0], ""))
    seen = ", ".join(f"{label}={_fmt(v)}" for label, v in zip(probe.labels, col.values[n:])
                     if v is not None or probe.n_sources == 1)
    return Check(name, "edge responses", PASS, seen or "not applicable to any")


def _under_timeout(probe: _Probe, scores: _Scores, name: str) -> Check:
    """``under timeout``: every call ends within the term's timeout."""
    from .execution import TIMEOUT

    col, again = scores.first[name], scores.second[name]
    slow = [i for i in range(len(probe.batch))
            if col.status.get(i) == TIMEOUT or again.status.get(i) == TIMEOUT]
    limit = f"timeout_s {probe.timeouts[name]:g}" + (
        "" if probe.declared[name][0] else " (none declared: the contract's default)")
    if slow:
        i, n = slow[0], probe.n_data
        where = f"row {i}" if i < n else f"{probe.labels[i - n]} response"
        return Check(name, "under timeout", FAIL, f"{len(slow)} calls ran past {limit}, e.g. on the {where}")
    worst = max(col.latency or [0.0])
    return Check(name, "under timeout", PASS, f"slowest call {worst * 1000:.1f} ms, {limit}")


def _deterministic(probe: _Probe, scores: _Scores, name: str) -> Check:
    """``deterministic``: two calls give the same scores (a failure only for a reward declared pure)."""
    a, b = scores.first[name].values, scores.second[name].values
    same = _equal(a, b, skip=scores.hung)
    if not probe.declared[name][1]:
        return Check(name, "deterministic", SKIP,
                     "not declared pure; two calls " + ("gave the same scores" if same else "differ"))
    if same:
        return Check(name, "deterministic", PASS, "two calls gave the same scores")
    return Check(name, "deterministic", FAIL,
                 f"declared pure, but two calls differ: {_diff(a, b, scores.hung)}")


def _same_everywhere(probe: _Probe, scores: _Scores, name: str) -> Check:
    """``same on every executor``: inline, process and ray give the scores of the declared executor."""
    _, _, executor, kind = probe.declared[name]
    col = scores.first[name]
    if kind == "model":
        return Check(name, "same on every executor", SKIP, "a model reward runs on its model pool")
    if not _equal(col.values, scores.second[name].values, skip=scores.hung):
        return Check(name, "same on every executor", SKIP, "its scores differ between two calls")
    diffs, ran = [], []
    for ex, got in scores.others.items():
        if isinstance(got, BaseException):
            diffs.append(f"{ex}: {type(got).__name__}: {got}")
            continue
        ran.append(ex)
        if not _equal(col.values, got[name].values, skip=scores.hung):
            diffs.append(f"{ex}: {_diff(col.values, got[name].values, scores.hung)}")
    if diffs:
        return Check(name, "same on every executor", FAIL, "; ".join(diffs))
    notes = f"; the {len(scores.hung)} rows that timed out were not run again" if scores.hung else ""
    return Check(name, "same on every executor", PASS,
                 f"{', '.join(ran)} agree (as declared: {executor})"
                 + (f"; {', '.join(scores.skipped)} not installed" if scores.skipped else "")
                 + ("; ray not checked: no term declares it (--ray adds it)" * ("ray" in scores.unasked))
                 + notes)


#: the contracts checked on every term that survives its calls, in the order they are reported
PER_TERM = (_returns_score, _applies, _edge_responses, _under_timeout, _deterministic, _same_everywhere)


def _ending_terms(probe: _Probe) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(term -> its column, for the terms whose calls ended a worker process; term -> its column,
    for every term run)``: all on one process pool first, each on its own only when some worker died.
    A model reward runs on its model pool: it is not run here."""
    names = [n for n, d in probe.declared.items() if d[3] != "model"]
    if not names:
        return {}, {}
    cols = probe.run("process", only=names)
    if not probe.crashes[-1]:
        return {}, cols
    exited = {}
    for name in names:
        own = probe.run("process", only=[name]) if len(names) > 1 else cols
        if probe.crashes[-1]:
            exited[name] = own[name]
    return exited, cols


def _survival(name: str, exited: Any, probed: Any, n: int) -> Check:
    """``survives its calls``: no call ended the process it ran in."""
    from .execution import ERROR

    if exited is None:
        return Check(name, "survives its calls", PASS if probed is not None else SKIP,
                     f"{n} calls on the process executor, no worker ended" if probed is not None
                     else "a model reward runs on its model pool")
    bad = [i for i in range(n) if exited.status.get(i) == ERROR]
    first = f"; first: {exited.errors.get(bad[0], '')}" if bad else ""
    return Check(name, "survives its calls", FAIL,
                 "a call ended the process it ran in (os._exit, a crash or a signal): it would end the "
                 f"trainer, or `score` on the inline executor; its other checks are not run{first}")


def _try(fn: Any) -> Any:
    try:
        return fn()
    except Exception as exc:
        return exc


def _equal(a: Sequence[Any], b: Sequence[Any], skip: set[int] | None = None) -> bool:
    return all(_same(x, y) for i, (x, y) in enumerate(zip(a, b)) if not skip or i not in skip) and len(
        a
    ) == len(b)


def _same(x: Any, y: Any) -> bool:
    if x is None or y is None:
        return x is y
    return x == y or (math.isnan(x) and math.isnan(y))


def _diff(a: Sequence[Any], b: Sequence[Any], skip: set[int] | None = None) -> str:
    i = next(k for k, (x, y) in enumerate(zip(a, b)) if not _same(x, y) and (not skip or k not in skip))
    return f"row {i}: {_fmt(a[i])} vs {_fmt(b[i])}"


def _fmt(v: Any) -> str:
    return "None" if v is None else f"{v:.4g}"

