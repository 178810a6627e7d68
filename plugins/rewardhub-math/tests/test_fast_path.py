"""The plain-number fast path (``rewardhub_math._fast``) gives what math-verify gives, and nothing of
sympy or math-verify is changed by importing or using the plugin."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _bench_rows(n: int, seed: int) -> list[dict]:
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        from make_samples import samples
    finally:
        sys.path.pop(0)
    return samples(n, seed=seed)


#: numbers as models write them: plain, signed, padded, with separators, percentages, fractions...
_NUMBERS = [
    "0",
    "-0",
    "7",
    "-3",
    "12.5",
    "-0.25",
    "007",
    "1,000",
    "1 000",
    "50%",
    "3/4",
    "2.50",
    "1e5",
    "3.0",
    ".5",
    "5.",
    "0.1",
    "-12",
    "1,234.5",
    "12,5",
    "\\frac{1}{2}",
    "\\dfrac{3}{4}",
    "x",
    "2^3",
    "\\pi",
    "\\sqrt{2}",
    "10\\%",
    "1.5 \\text{ cm}",
    "$5",
    "\\$5",
    "123456789012345",
    "1234567890123456",
    "-999999999999999",
    "0.000001",
    "3.14159265358979",
    "\\infty",
    "-\\infty",
    "(1, 2)",
    "\\{1, 2\\}",
]
_TEMPLATES = [
    "\\boxed{%s}",
    "The answer is %s.",
    "Answer: %s",
    "$%s$",
    "so x = %s",
    "%s",
    "\\boxed{%s} and \\boxed{2}",
    "we get $\\boxed{%s}$.",
    "Final answer: $%s$ dollars",
    "= %s\n",
    "%s apples",
    "\\(%s\\)",
    "\\[ %s \\]",
    "**%s**",
    "First 3, then %s",
    "\\boxed{%s}.\nAnswer: 4",
    "The result is %s, i.e. $\\frac{8}{2}$",
    "I think it is %s or 5",
    "x = %s, y = 2",
    "%s%%",
    "no answer",
    "\\boxed{\\boxed{%s}}",
    "\\boxed{%s}\\boxed{3}",
]


def _texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = rng.random()
        if k < 0.4:
            number = rng.choice(_NUMBERS)
        elif k < 0.6:
            number = str(rng.randint(-10 ** rng.randint(1, 16), 10 ** rng.randint(1, 16)))
        elif k < 0.8:
            number = f"{rng.uniform(-1000, 1000):.{rng.randint(1, 12)}f}"
        else:  # fractions: the fast path takes \frac of two plain integers
            a, b = (
                rng.randint(-(10 ** rng.randint(1, 16)), 10 ** rng.randint(1, 16)),
                rng.randint(-3, 10 ** rng.randint(1, 4)),
            )
            number = rng.choice(["\\frac{%d}{%d}", "-\\frac{%d}{%d}", "\\dfrac{%d}{%d}", "\\frac{%d.5}{%d}",
                                 "\\frac {%d}{%d}", "\\frac%d%d", "\\tfrac{%d}{%d}"]) % (a, b)
        template = rng.choice(_TEMPLATES)
        out.append(template % number if "%s" in template else template)
    return out


def _same(a, b) -> bool:
    import sympy

    if isinstance(a, str) or isinstance(b, str):
        return a == b
    return type(a) is type(b) and sympy.srepr(a) == sympy.srepr(b) and hash(a) == hash(b)


def test_the_fast_parse_is_math_verifys_parse():
    from math_verify import parse

    from rewardhub_math import _fast

    texts = _texts(3000, seed=11) + [r["response"] for r in _bench_rows(1000, seed=5)]
    fast = 0
    for text in texts:
        got = _fast.parse(text)
        if got is None:
            continue  # not a plain number: math-verify itself runs
        fast += 1
        want = parse(text, parsing_timeout=None)
        assert len(got) == len(want) and all(_same(a, b) for a, b in zip(got, want)), (text, got, want)
    assert fast >= 2000  # most of them take the fast path


def test_scores_are_math_verifys_over_generated_cases(monkeypatch):
    """Every score with the fast path equals the score with math-verify alone (fast path off),
    golds as the bench writes them and golds of every kind ("0.5" vs "1/2", "1,000", percentages)."""
    from rewardhub_math import _fast
    from rewardhub_math import reward as mod

    rng = random.Random(3)
    cases = [(r["response"], r["ground_truth"]) for r in _bench_rows(1500, seed=2)]
    golds = [
        "0.5",
        "1/2",
        "\\frac{1}{2}",
        "1000",
        "1,000",
        "#### 1,000",
        "50%",
        "50",
        "0.50",
        "-3",
        "3",
        "7.0",
        "12.5",
        "25/2",
        "1e3",
        "007",
        "2.50",
        "\\$5",
        "5",
    ]
    cases += [(text, rng.choice(golds)) for text in _texts(1500, seed=4)]
    fast = [mod.math_verify(response=r, ground_truth=g)["score"] for r, g in cases]
    mod._parse_gold_once.cache_clear()
    monkeypatch.setattr(_fast, "parse", lambda text: None)
    monkeypatch.setattr(mod, "_plain_number", lambda gold: None)
    try:
        slow = [mod.math_verify(response=r, ground_truth=g)["score"] for r, g in cases]
    finally:
        mod._parse_gold_once.cache_clear()
    differ = [(c, a, b) for c, a, b in zip(cases, fast, slow) if a != b]
    assert differ == []
    assert 0.2 < sum(fast) / len(fast) < 0.9


@pytest.mark.parametrize("use", ["import", "score"])
def test_the_plugin_leaves_sympy_and_math_verify_as_they_are(use):
    """Importing the plugin (and scoring with it) changes no class or function of sympy or
    math-verify: ``sympy.Number.__new__`` and every public function of math-verify stay the same objects."""
    script = f"""
import sympy, math_verify, math_verify.parser, math_verify.grader
def snapshot():
    names = {{}}
    for mod in (math_verify, math_verify.parser, math_verify.grader):
        for k, v in vars(mod).items():
            if callable(v):  # (math-verify's own flags, such as TIMEOUT_WARNING_SHOWN, are its to set)
                names[(mod.__name__, k)] = v
    return (sympy.Number.__dict__["__new__"], sympy.Integer.__dict__.get("__new__"),
            sympy.Float.__dict__["__new__"], names)
before = snapshot()
import rewardhub_math.reward as r
if {use!r} == "score":
    assert r.math_verify(response="so \\\\boxed{{7}}", ground_truth="7")["score"] == 1.0
after = snapshot()
assert before[:3] == after[:3], "a sympy class was changed"
changed = sorted(k for k in before[3] if before[3][k] is not after[3].get(k))
assert not changed, changed
print("ok")
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-2000:]


def test_the_dependency_pins_the_releases_the_fast_path_follows():
    """The plugin's math-verify range is the fast path's ``FOLLOWS``, and the installed release is in it."""
    import tomllib
    from importlib.metadata import version

    from rewardhub_math._fast import FOLLOWS
    from rewardhub_math._fast import follows

    project = tomllib.loads((ROOT / "plugins/rewardhub-math/pyproject.toml").read_text())["project"]
    deps = project["dependencies"]
    (pin,) = [d for d in deps if d.startswith("math-verify")]
    (low, high) = (".".join(map(str, v)) for v in FOLLOWS)
    assert pin.endswith(f">={low},<{high}"), f"{pin}: pin math-verify to FOLLOWS of rewardhub_math._fast"
    installed = version("math-verify")
    assert follows(installed), (
        f"math-verify {installed} is installed; rewardhub_math._fast follows {low} <= it < {high}: check "
        "its extraction against that release's math_verify.parser, then widen FOLLOWS and the pin")
    assert [follows(v) for v in ("0.8.9", "0.9.0", "0.9.7.post1", "0.10.0", "1.0.0")] == [
        False, True, True, False, False]


def test_the_math_verify_internals_the_fast_path_reads_are_as_it_expects():
    """What ``_fast`` takes from ``math_verify.parser`` (functions, their parameters, the config fields
    and the named groups of the patterns): a release that changes any of them fails here by name."""
    import dataclasses
    import inspect
    import re

    from math_verify import parser

    changed = "math_verify.parser changed; rewardhub_math._fast follows it: update _fast (and FOLLOWS)"
    for fn, params in ((parser.get_extraction_regexes, ["target_types"]),
                       (parser.normalize_latex, ["text", "config"])):
        assert list(inspect.signature(fn).parameters) == params, f"{fn.__name__}: {changed}"
    latex = parser.LatexExtractionConfig()
    assert "boxed" in {f.name for f in dataclasses.fields(latex.normalization_config)}, \
        f"NormalizationConfig.boxed: {changed}"
    res = parser.get_extraction_regexes([latex, parser.ExprExtractionConfig()])
    targets = [type(target) for _, target in res]
    assert targets == [parser.LatexExtractionConfig, parser.ExprExtractionConfig], \
        f"get_extraction_regexes targets: {changed}"
    names = {re.sub(r"\d+$", "", n) for patterns, _ in res for p, _ in patterns for n in p.groupindex}
    for group in ("integer", "decimal", "percent", "first_latexBoxed", "first_percent",
                  "next1_latexInlineDollar"):
        assert group in names, f"the pattern group {group!r}: {changed}"
    for patterns, _target in res:
        assert all(isinstance(p, re.Pattern) and isinstance(priority, int) for p, priority in patterns), \
            f"(pattern, priority) pairs: {changed}"
