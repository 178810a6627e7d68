"""A reward call with no timeout_s that runs long in ``rewardhub score`` is named (reward, row, how long)
while it runs, on every executor whose calls run in the scoring process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

HANGS = textwrap.dedent('''
    import os, time

    def _wait(response, kw):
        if response == "hang":
            while not os.path.exists(kw["extra_info"]["release"]):  # released by the test
                time.sleep(0.02)
        return 1.0

    def hangs(*, response, **kw):
        return _wait(response, kw)

    async def hangs_async(*, response, **kw):
        return _wait(response, kw)  # a blocking call: it holds the event loop
''')


@pytest.mark.timeout(180)
@pytest.mark.parametrize("function,executor", [("hangs", "inline"), ("hangs", "thread"),
                                               ("hangs_async", "inline")])
def test_a_call_without_a_timeout_that_runs_long_is_named(tmp_path, function, executor):
    (tmp_path / "r.py").write_text(HANGS)
    release = tmp_path / "release"
    (tmp_path / "c.yaml").write_text(
        f"reward:\n  rewards:\n    - {{path: r.py, function: {function}, executor: {executor}}}\n")
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"response": r, "extra_info": {"release": str(release)}}) + "\n"
                            for r in ("a", "b", "hang", "c")))
    cmd = [sys.executable, "-m", "rewardhub", "score", "c.yaml", str(rows), "-o", "out.jsonl",
           "--still-waiting-s", "0.5"]
    with subprocess.Popen(cmd, cwd=tmp_path, stderr=subprocess.PIPE, text=True, env=os.environ) as proc:
        assert proc.stderr is not None
        try:
            for line in proc.stderr:  # the line comes while the call still hangs
                if "still waiting" in line:
                    break
            else:
                pytest.fail("no line named the hanging call")
        finally:
            release.touch()
        rest = proc.stderr.read()
        assert proc.wait(60) == 0, rest
    assert line.startswith(f"WARNING: still waiting on reward {function!r} for row 2, ")
    assert "it has no timeout_s" in line
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == 4


def test_the_wait_is_checked(cli, tmp_path):
    (tmp_path / "c.yaml").write_text("reward:\n  rewards:\n    - {name: exact_match}\n")
    (tmp_path / "rows.jsonl").write_text('{"response": "a", "ground_truth": "a"}\n')
    for bad in ("nan", "inf", "-1"):
        res = cli("score", str(tmp_path / "c.yaml"), str(tmp_path / "rows.jsonl"), "--still-waiting-s", bad)
        assert res.returncode == 2 and "give seconds" in res.stderr and "Traceback" not in res.stderr
