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
- ``same on every executor``: inline, process and (when Ray is installed) ray give the same scores.

Every run scores with ``on_failure: nan`` so that a failure stays visible as a status (never a
score) whatever the term declares.
"""

from __future__ import annotations

import dataclasses
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
                 executors: Sequence[str] = EXECUTORS, default_timeout_s: float = 10.0) -> list[Check]:
    """Check every term of ``reward_cfg`` (a ``reward:`` section); the checks in term order."""
    from .config.schema import validate_reward
    from .execution import ERROR
    from .execution import TIMEOUT
    from .execution import Runner

    section = validate_reward(reward_cfg)
    data = [dict(r) for r in (rows or DEFAULT_ROWS)]
    # the edge responses on the first row of each data source (a reward routed by data_source sees them)
    firsts = list({repr(r.get("data_source")): r for r in reversed(data)}.values())[::-1]
    edge = [{**row, "response": text} for text in EDGE_RESPONSES.values() for row in firsts]
    labels = [label for label in EDGE_RESPONSES for _ in firsts]
    batch = data + edge
    with Runner.from_config(section) as probe:
        terms = {t.name: t for t in probe.terms}
    declared = {name: (t.policy.timeout_s, t.policy.pure, t.policy.executor, t.invoker.kind)
                for name, t in terms.items()}
    timeouts = {name: d[0] or default_timeout_s for name, d in declared.items()}

    crashes: list[int] = []  # per run on the process executor: how many of its workers died

    def run(executor: str | None, keep: Sequence[int] | None = None,
            only: Collection[str] | None = None) -> dict[str, Any]:
        """Each term's column on ``batch`` (only the rows in ``keep``: the others are ``None``), every
        term (or those in ``only``) on ``executor`` (``None``: as declared) under its timeout (inline:
        none; it cannot stop one)."""
        from .distributed import runner_from_config
        from .execution import Column

        rewards = tuple(dataclasses.replace(term, on_failure="nan",
                                            timeout_s=None if executor == "inline" else timeouts[name],
                                            executor=executor if executor is not None else term.executor)
                        for term, name in zip(section.rewards, terms) if only is None or name in only)
        cfg = dataclasses.replace(section, rewards=rewards)
        if executor == "ray":
            cfg = dataclasses.replace(
                cfg, workers=dataclasses.replace(cfg.workers, num_workers=max(1, cfg.workers.num_workers))
            )
        rows = batch if keep is None else [batch[i] for i in keep]
        with runner_from_config(cfg) as runner:
            cols = runner.score(rows).columns if rows else {}
            crashes.append(runner.worker_crashes)
        if keep is None:
            return dict(cols)
        full = {n: Column(len(batch)) for n in terms}
        for n, col in cols.items():
            for j, i in enumerate(keep):
                full[n].values[i] = col.values[j]
        return full

    # a call that ends its process (os._exit, a crash, a signal) would end this one on the inline
    # executor: every term runs on the process executor first, and one that ended a worker fails
    # `survives its calls` and is not run again
    exited, probed = _ending_terms(run, crashes, [n for n, d in declared.items() if d[3] != "model"])
    out: list[Check] = []
    for name in terms:
        out.append(_survival(name, exited.get(name), probed.get(name), len(batch)))
    if exited:
        section = dataclasses.replace(section, rewards=tuple(
            t for t, n in zip(section.rewards, terms) if n not in exited))
        terms = {n: t for n, t in terms.items() if n not in exited}
        declared = {n: d for n, d in declared.items() if n not in exited}
        if not terms:
            return out
    first, second = run(None), run(None)
    hung = {i for cols in (first, second) for col in cols.values() for i in range(len(batch))
            if col.status.get(i) == TIMEOUT}
    # an inline call cannot be stopped: inline scores only the rows on which no call timed out above
    keep = [i for i in range(len(batch)) if i not in hung]
    others = {ex: _try(lambda ex=ex: run(ex, keep if ex == "inline" else None))
              for ex in executors if ex != "ray" or _ray_installed()}
    for name, (timeout, pure, executor, kind) in declared.items():
        col = first[name]
        st = col.status
        errs = [(i, col.errors.get(i, "")) for i in range(len(data)) if st.get(i) == ERROR]
        out.append(Check(name, "returns a score", FAIL if errs else PASS,
                         f"{len(errs)} of {len(data)} rows failed; first: {errs[0][1]}" if errs
                         else f"{len(data)} rows: " + _summary(col.values[:len(data)]),
                         col.where.get(errs[0][0], "") if errs else ""))
        out.append(_applied(name, terms[name].routes, col, len(data)))
        bad = [(label, col.errors.get(len(data) + k, "")) for k, label in enumerate(labels)
               if st.get(len(data) + k) == ERROR]
        first_bad = next((len(data) + k for k in range(len(labels)) if st.get(len(data) + k) == ERROR), -1)
        out.append(
            Check(
                name,
                "edge responses",
                FAIL if bad else PASS,
                "; ".join(f"{label}: {err}" for label, err in bad[:4]) + (" ..." if len(bad) > 4 else "")
                if bad
                else ", ".join(
                    f"{label}={_fmt(v)}"
                    for label, v in zip(labels, col.values[len(data) :])
                    if v is not None or len(firsts) == 1
                )
                or "not applicable to any",
                col.where.get(first_bad, ""),
            )
        )
        slow = [i for i in range(len(batch)) if st.get(i) == TIMEOUT or second[name].status.get(i) == TIMEOUT]
        worst = max(col.latency or [0.0])
        limit = f"timeout_s {timeouts[name]:g}" + (
            "" if timeout else " (none declared: the contract's default)"
        )
        out.append(
            Check(
                name,
                "under timeout",
                FAIL if slow else PASS,
                f"{len(slow)} calls ran past {limit}, e.g. on the {_row_label(slow[0], len(data), labels)}"
                if slow
                else f"slowest call {worst * 1000:.1f} ms, {limit}",
            )
        )
        same = _equal(col.values, second[name].values, skip=hung)
        if pure:
            out.append(Check(name, "deterministic", PASS if same else FAIL,
                             "two calls gave the same scores" if same
                             else "declared pure, but two calls differ: "
                             f"{_diff(col.values, second[name].values, hung)}"))
        else:
            out.append(Check(name, "deterministic", SKIP, "not declared pure; two calls "
                             + ("gave the same scores" if same else "differ")))
        if kind == "model":
            out.append(Check(name, "same on every executor", SKIP, "a model reward runs on its model pool"))
            continue
        if not same:
            out.append(Check(name, "same on every executor", SKIP, "its scores differ between two calls"))
            continue
        diffs, ran = [], []
        notes = [f"inline skipped the {len(hung)} rows that timed out" if hung and "inline" in others else ""]
        for ex, got in others.items():
            if isinstance(got, BaseException):
                diffs.append(f"{ex}: {type(got).__name__}: {got}")
                continue
            ran.append(ex)
            if not _equal(col.values, got[name].values, skip=hung):
                diffs.append(f"{ex}: {_diff(col.values, got[name].values, hung)}")
        skipped = [ex for ex in executors if ex not in others]
        out.append(Check(name, "same on every executor", FAIL if diffs else PASS,
                         "; ".join(diffs) if diffs else f"{', '.join(ran)} agree (as declared: {executor})"
                         + (f"; {', '.join(skipped)} not installed" if skipped else "")
                         + "".join(f"; {n}" for n in notes if n)))
    return out


def _ending_terms(run: Any, crashes: list[int], names: list[str]
                  ) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(term -> its column, for the terms whose calls ended a worker process; term -> its column,
    for every term run)``: all on one process pool first, each on its own only when some worker died."""
    if not names:
        return {}, {}
    cols = run("process", only=names)
    if not crashes[-1]:
        return {}, cols
    exited = {}
    for name in names:
        own = run("process", only=[name]) if len(names) > 1 else cols
        if crashes[-1]:
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


def _applied(name: str, routes: str, col: Any, n_data: int) -> Check:
    """``applies to a row``: a reward that scored none of the data rows was never tested."""
    from .execution import NOT_APPLICABLE

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


def _try(fn: Any) -> Any:
    try:
        return fn()
    except Exception as exc:
        return exc


def _ray_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("ray") is not None


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


def _row_label(i: int, n_data: int, labels: Sequence[str]) -> str:
    return f"row {i}" if i < n_data else f"{labels[i - n_data]} response"


def _fmt(v: Any) -> str:
    return "None" if v is None else f"{v:.4g}"


def _summary(values: Sequence[Any]) -> str:
    return ", ".join(_fmt(v) for v in values[:6]) + (" ..." if len(values) > 6 else "")
