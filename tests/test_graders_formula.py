"""``calculate_output``'s evaluator against Python's own arithmetic on generated formulas (Hypothesis), and
``meteor`` without WordNet data: its flag, not a number (issue 46)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from rewardhub.graders import GraderError
from rewardhub.graders import run_answer
from rewardhub.graders._formula import Formula

NAMES = ("a", "b", "c")


def _exprs() -> st.SearchStrategy[str]:
    leaf = st.one_of(
        st.sampled_from(NAMES), st.integers(0, 9).map(str), st.floats(0.1, 9.9).map(lambda x: f"{x:.2f}")
    )
    return st.recursive(
        leaf,
        lambda inner: st.one_of(
            st.tuples(inner, st.sampled_from(["+", "-", "*", "/"]), inner).map(
                lambda t: f"({t[0]} {t[1]} {t[2]})"
            ),
            st.tuples(st.sampled_from(["min", "max"]), inner, inner).map(lambda t: f"{t[0]}({t[1]}, {t[2]})"),
            st.tuples(st.sampled_from(["abs", "floor", "ceil"]), inner).map(lambda t: f"{t[0]}({t[1]})"),
            inner.map(lambda e: f"-{e}"),
        ),
        max_leaves=8,
    )


@settings(max_examples=300, deadline=None, derandomize=True)
@given(_exprs(), st.fixed_dictionaries({n: st.floats(0, 1) for n in NAMES}))
def test_the_evaluator_agrees_with_python_on_generated_formulas(expr, values):
    env = {"min": min, "max": max, "abs": abs, "floor": math.floor, "ceil": math.ceil, **values}
    try:
        want = float(eval(expr, {"__builtins__": {}}, env))  # the reference, in the test only
    except ZeroDivisionError:
        want = None
    formula = Formula(expr)
    if want is None or not math.isfinite(want):
        with pytest.raises(GraderError):
            formula(values)
    else:
        assert formula(values) == pytest.approx(want, rel=1e-12, abs=1e-12)
    assert formula.names <= set(NAMES)


def test_meteor_without_wordnet_is_its_flag_not_a_number():
    import nltk

    spec = {
        "type": "text_similarity",
        "name": "m",
        "input": "{{ sample.output_text }}",
        "reference": "a cat",
        "evaluation_metric": "meteor",
    }
    got = run_answer(spec, {}, {"output_text": "a cat"})
    try:
        nltk.data.find("corpora/wordnet")
    except LookupError:
        assert got["reward"] == 0.0 and got["metadata"]["errors"]["other_error"] is True
        assert "nltk.downloader wordnet" in got["metadata"]["error_message"]
    else:  # where the data is installed, the metric runs
        assert 0.5 < got["reward"] <= 1.0
