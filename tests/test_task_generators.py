"""A task's generator, taken at its word only as far as it is right (issue 42 §6): one that raises or
yields a string is an error naming the task (no traceback); ``--size N`` writes N rows even where the
generator ignores its size or never ends; rows are written as they come (a huge ``--size`` does not build
every row first); a task name that two packages register is reported as such."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rewardhub.cli import main
from rewardhub.testing import write_distribution

GENERATORS = '''
import glob, itertools, os

def row(i):
    return {"prompt": f"{i}+1?", "ground_truth": str(i + 1)}

def raises(size, seed):
    yield row(0)
    raise ValueError("the data server said no")

def strings(size, seed):
    yield "2+2?"

def ignores_size(size, seed):
    return [row(i) for i in range(100)]

def endless(size, seed):
    return (row(i) for i in itertools.count())

def streamed(size, seed):
    out = os.environ["STREAM_OUT"]
    for i in range(size):
        if i == 30_000:  # by now the rows before are on disk, if they are written as they come
            on_disk = sum(os.path.getsize(p) for p in glob.glob(out + ".*.tmp"))
            with open(out + ".seen", "w") as f:
                f.write(str(on_disk))
            return
        yield row(i)

RAISES = {"reward": "exact_match", "rows": raises, "size": 5}
STRINGS = {"reward": "exact_match", "rows": strings, "size": 5}
IGNORES = {"reward": "exact_match", "rows": ignores_size, "size": 5}
ENDLESS = {"reward": "exact_match", "rows": endless, "size": 5}
STREAMED = {"reward": "exact_match", "rows": streamed, "size": 5}
'''


@pytest.fixture()
def tasks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    names = {"raises": "RAISES", "strings": "STRINGS", "ignores": "IGNORES", "endless": "ENDLESS",
             "streamed": "STREAMED"}
    write_distribution(tmp_path, "gen-tasks", "1.0", {"rewardhub.tasks": {
        f"gen.{k}": f"gen_tasks:{v}" for k, v in names.items()}}, {"gen_tasks": GENERATORS})
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("REWARDHUB_NO_CACHE", "1")
    return tmp_path


@pytest.mark.parametrize("task,words", [
    ("gen.raises", ["task 'gen.raises' (gen-tasks 1.0)", "row 2", "ValueError: the data server said no"]),
    ("gen.strings", ["task 'gen.strings' (gen-tasks 1.0)", "row 1 is a str", "not a mapping"]),
])
def test_a_generator_that_fails_is_an_error_naming_the_task(tasks, capsys, task, words):
    out = tasks / "rows.jsonl"
    assert main(["data", task, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    for w in words:
        assert w in err, err
    assert not out.exists() and not list(tasks.glob("rows.jsonl.*"))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("task", ["gen.ignores", "gen.endless"])
def test_size_is_the_number_of_rows_written(tasks, task):
    out = tasks / "rows.jsonl"
    assert main(["data", task, "--size", "3", "-o", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["reward_model"]["ground_truth"] for r in rows] == ["1", "2", "3"]


@pytest.mark.timeout(300)
def test_rows_are_written_as_they_come(tasks, monkeypatch):
    out = tasks / "rows.jsonl"
    monkeypatch.setenv("STREAM_OUT", str(out))
    assert main(["data", "gen.streamed", "--size", "100000000", "-o", str(out)]) == 0
    assert int((tasks / "rows.jsonl.seen").read_text()) > 0  # rows were on disk while it generated
    assert len(out.read_text().splitlines()) == 30_000


def test_a_task_name_two_packages_register_is_a_duplicate(tasks, tmp_path, capsys):
    other = tmp_path / "other"
    write_distribution(other, "other-tasks", "2.0", {"rewardhub.tasks": {"gen.ignores": "other_tasks:T"}},
                       {"other_tasks": "T = {'reward': 'exact_match', 'file': 'rows.jsonl'}\n"})
    (other / "rows.jsonl").write_text('{"prompt": "1+1?", "ground_truth": "2"}\n')
    import sys
    sys.path.insert(0, str(other))
    try:
        assert main(["tasks", "--json"]) == 0
        listed = [t for t in json.loads(capsys.readouterr().out) if t["name"] == "gen.ignores"]
        assert len(listed) == 1 and listed[0]["kind"] == "duplicate", listed
        assert "gen-tasks 1.0" in listed[0]["summary"] and "other-tasks 2.0" in listed[0]["summary"]
        assert main(["data", "gen.ignores", "-o", str(tmp_path / "x.jsonl")]) == 2
        assert "registered by 2 packages" in capsys.readouterr().err
    finally:
        sys.path.remove(str(other))
