"""Meta-tests on the test suite itself (issue 44 §3): its modules stay small, and every run of it says
where its time goes."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MAX_TEST_LINES = 400


def _test_files() -> list[Path]:
    found = [*REPO.glob("tests/**/*.py"), *REPO.glob("plugins/*/tests/**/*.py")]
    return sorted(p for p in found if "__pycache__" not in p.parts)


def test_test_modules_stay_under_the_size_limit():
    """A test module over the limit is split by subject (its shared helpers into a ``*_helpers.py``)."""
    files = _test_files()
    assert len(files) > 100
    sizes = {str(p.relative_to(REPO)): len(p.read_text().splitlines()) for p in files}
    over = {name: n for name, n in sizes.items() if n > MAX_TEST_LINES}
    assert over == {}, f"split these by subject (at most {MAX_TEST_LINES} lines each): {over}"


def test_every_pytest_run_of_make_test_prints_its_slowest_tests():
    make = (REPO / "Makefile").read_text()
    target = re.search(r"^test:.*\n((?:\t.*\n|#.*\n|\s*\n)+)", make, re.M)
    assert target, "the Makefile has no test target"
    lines = target.group(1).splitlines()
    runs = [line for line in lines if "pytest" in line and not line.strip().startswith("#")]
    assert len(runs) >= 2, target.group(1)
    for line in runs:
        assert re.search(r"--durations=\d+", line), (
            f"this pytest run does not say where its time goes: {line}")
