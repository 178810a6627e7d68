"""One back-off schedule (:mod:`rewardhub._backoff`) for the judge and the remote client (issue 44 §1)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from rewardhub._backoff import backoff_wait
from rewardhub._backoff import retry_after_s

REPO = Path(__file__).resolve().parent.parent


def test_the_wait_doubles_up_to_its_cap_and_retry_after_only_lengthens_it():
    assert [backoff_wait(n, 0.5, 10.0) for n in range(7)] == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert backoff_wait(0, 0.5, 10.0, retry_after=3.0) == 3.0  # the server asks for longer
    assert backoff_wait(3, 0.5, 10.0, retry_after=1.0) == 4.0  # never shorter than the schedule
    assert backoff_wait(0, 0.5, 10.0, retry_after=3600.0) == 10.0  # nor past the cap
    assert backoff_wait(10_000, 0.5, 10.0) == 10.0  # no overflow however many tries


@pytest.mark.parametrize(("header", "seconds"), [("2", 2.0), ("1.5", 1.5), (None, None), ("soon", None),
                                                 ("Wed, 21 Oct 2026 07:28:00 GMT", None), ("nan", None),
                                                 ("inf", None), ("-1", None)])
def test_retry_after_is_read_in_seconds_or_not_at_all(header, seconds):
    assert retry_after_s(header) == seconds


@pytest.mark.parametrize("module", ["rewardhub/builtin/model_http.py",
                                    "rewardhub/execution/remote/_http.py"])
def test_both_clients_wait_by_the_one_schedule(module):
    tree = ast.parse((REPO / module).read_text(encoding="utf-8"))
    called = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    assert "backoff_wait" in called
    powers = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Pow)]
    assert powers == [], "a schedule of its own"
