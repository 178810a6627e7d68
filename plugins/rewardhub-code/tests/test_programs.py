"""Program extraction and ground-truth formats (no code runs here), and bad input."""

from __future__ import annotations

import json

import pytest
from rewardhub_code._programs import AssertTests
from rewardhub_code._programs import IOTests
from rewardhub_code._programs import extract_code
from rewardhub_code._programs import outputs_match
from rewardhub_code._programs import parse_tests
from rewardhub_code.reward import code_io
from rewardhub_code.reward import code_tests

from rewardhub.errors import UsageError


@pytest.mark.parametrize(("response", "code"), [
    ("```python\nx = 1\n```", "x = 1\n"),
    ("```py\nx = 1\n```", "x = 1\n"),
    ("```\nx = 1\n```", "x = 1\n"),
    ("~~~python\nx = 1\n~~~", "x = 1\n"),
    ("first\n```python\nx = 1\n```\nthen the fix\n```python\nx = 2\n```\n", "x = 2\n"),
    ("```python\nx = 1\n```\nusage:\n```\n$ python x.py\n```", "x = 1\n"),  # a tagged block wins
    ("```bash\nls\n```", None),
    ("````python\ns = '```'\n````", "s = '```'\n"),
    ("no code at all", None),
    ("", None),
])
def test_extract_code(response, code):
    assert extract_code(response) == code


def test_extract_code_other_language():
    assert extract_code("```cpp\nint main(){}\n```", language="cpp") == "int main(){}\n"


@pytest.mark.parametrize(("gt", "expected"), [
    (["assert f()"], AssertTests(("assert f()",))),
    ("assert f()\nassert g()", AssertTests(("assert f()\nassert g()",))),
    (json.dumps(["assert f()"]), AssertTests(("assert f()",))),
    ({"tests": ["assert f()"], "setup": "import math"}, AssertTests(("assert f()",), "import math")),
    ({"test": "def check(c):\n    assert c()", "entry_point": "f"},
     AssertTests(("check(f)",), "def check(c):\n    assert c()")),
    ({"inputs": ["1\n"], "outputs": ["2\n"]}, IOTests(("1\n",), ("2\n",))),
    (json.dumps({"inputs": ["1\n"], "outputs": [2]}), IOTests(("1\n",), ("2",))),
    ([{"input": "a", "output": "b"}], IOTests(("a",), ("b",))),
    ({"input_output": json.dumps({"inputs": ["x"], "outputs": ["y"]})}, IOTests(("x",), ("y",))),
    ({"inputs": [["1", "2"]], "outputs": [["3"]]}, IOTests(("1\n2\n",), ("3\n",))),
])
def test_ground_truth_formats(gt, expected):
    assert parse_tests(gt) == expected


@pytest.mark.parametrize(("gt", "match"), [
    (None, "ground_truth is a NoneType"),
    ("", "ground_truth is empty"),
    ([], "ground_truth is an empty list"),
    ({"inputs": ["1"], "outputs": []}, "has 1 inputs but 0 outputs"),
    ({"inputs": "1", "outputs": "2"}, "must both be lists"),
    ({"foo": 1}, "has keys \\['foo'\\], none of"),
    ([{"input": "1"}], "list item has no 'output' key"),
    ({"tests": [3.5j]}, "tests\\[0\\] is a complex"),
])
def test_bad_ground_truth_names_the_problem_and_the_formats(gt, match):
    with pytest.raises(UsageError, match=match) as info:
        parse_tests(gt)
    assert "expected a list of assert statements" in str(info.value)


def test_bad_kwargs_are_usage_errors():
    resp = "```python\nx = 1\n```"
    # the one wording of rewardhub.config.fields
    with pytest.raises(
        UsageError,
        match=r"^unknown key reward.sandbox.urll\ndid you mean reward.sandbox.url\? "
        r"allowed: language, max_concurrent, memory_limit_mb, retries, timeout_s, url$",
    ):
        code_tests(response=resp, ground_truth=["assert x"], sandbox={"urll": "http://x"})
    with pytest.raises(
        UsageError,
        match=r"^unknown key kwargs.local.memory\ndid you mean kwargs.local.memory_mb\? "
        r"allowed: cpu_s, drop_privileges, ",
    ):
        code_tests(response=resp, ground_truth=["assert x"], local={"memory": 5})
    with pytest.raises(
        UsageError,
        match=r"^reward.sandbox.language='cpp' is not valid: the local sandbox runs Python "
        r"only\nset reward.sandbox.url to a SandboxFusion server",
    ):
        code_tests(response=resp, ground_truth=["assert x"], sandbox={"language": "cpp"})
    with pytest.raises(
        UsageError,
        match=r"^reward.sandbox.url='localhost:8080' is not valid: not an http\(s\) URL\n"
        r"set it to the SandboxFusion endpoint",
    ):
        code_tests(response=resp, ground_truth=["assert x"], sandbox={"url": "localhost:8080"})
    with pytest.raises(UsageError, match="code_io: ground_truth holds assert-style tests"):
        code_io(response=resp, ground_truth=["assert x"])


def test_outputs_match_ignores_trailing_whitespace_only():
    assert outputs_match("1 2\n3\n\n", "1 2  \n3")
    assert outputs_match("a\r\nb\r\n", "a\nb\n")
    assert not outputs_match("1  2\n", "1 2\n")
    assert not outputs_match(" 1\n", "1\n")
