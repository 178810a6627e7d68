"""Graders by name (issue 46): a package ships grader JSON files through the ``rewardhub.graders`` entry
point group; ``rewardhub list`` shows them with dist and version, ``check`` refuses a broken one without
calling anything, ``score`` runs one by name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

GRADER = {
    "type": "multi",
    "calculate_output": "0.5 * exact + 0.5 * close",
    "graders": {
        "exact": {
            "type": "string_check",
            "name": "exact",
            "input": "{{ sample.output_text }}",
            "reference": "{{ item.answer }}",
            "operation": "eq",
        },
        "close": {
            "type": "text_similarity",
            "name": "close",
            "input": "{{ sample.output_text }}",
            "reference": "{{ item.answer }}",
            "evaluation_metric": "fuzzy_match",
        },
    },
}


@pytest.fixture
def shipped(tmp_path):
    """A distribution on a folder of sys.path that ships two grader files, one of them not valid."""
    pkg = tmp_path / "site" / "graderpkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "exact_or_close.json").write_text(json.dumps(GRADER))
    (pkg / "half.json").write_text(json.dumps({"type": "string_check", "operation": "like"}))
    dist = tmp_path / "site" / "graderpkg-0.3.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: graderpkg\nVersion: 0.3\n")
    (dist / "entry_points.txt").write_text(
        "[rewardhub.graders]\nexact_or_close = graderpkg:exact_or_close\nhalf_grader = graderpkg:half\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{tmp_path / 'site'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return tmp_path, env


def rh(env, cwd, *args):
    return subprocess.run(
        [sys.executable, "-m", "rewardhub", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.timeout(300)
def test_shipped_graders_are_listed_checked_and_scored_by_name(shipped):
    where, env = shipped
    out = rh(env, where, "list", "--json")
    assert out.returncode == 0, out.stderr
    rows = {r["name"]: r for r in json.loads(out.stdout)}
    good, bad = rows["exact_or_close"], rows["half_grader"]
    assert (good["dist"], good["version"], good["status"]) == ("graderpkg", "0.3", "ok")
    assert (bad["dist"], bad["status"]) == ("graderpkg", "broken")
    assert "input: missing" in bad["error"] and "reference: missing" in bad["error"]

    (where / "ok.yaml").write_text("reward:\n  rewards:\n    - name: exact_or_close\n")
    (where / "bad.yaml").write_text("reward:\n  rewards:\n    - name: half_grader\n")
    assert rh(env, where, "check", "ok.yaml").returncode == 0
    bad_check = rh(env, where, "check", "bad.yaml")
    assert bad_check.returncode != 0 and "reference: missing" in bad_check.stderr

    (where / "rows.jsonl").write_text(
        "".join(
            json.dumps({"response": r, "extra_info": {"answer": "Paris"}}) + "\n" for r in ("Paris", "Lyon")
        )
    )
    scored = rh(env, where, "score", "ok.yaml", "rows.jsonl", "-o", "out.jsonl")
    assert scored.returncode == 0, scored.stderr
    rows_out = [json.loads(x) for x in Path(where / "out.jsonl").read_text().splitlines()]
    assert rows_out[0]["score"] == 1.0 and rows_out[0]["extra"]["exact_or_close"] == {
        "exact": 1.0,
        "close": 1.0,
    }
    assert rows_out[1]["extra"]["exact_or_close"]["exact"] == 0.0
