"""The dataset reader: JSONL, parquet and save_to_disk folders give the same rows; bad data is one error
naming the file, the row and the column; `rewardhub score` reads all three in verl's row format."""

from __future__ import annotations

import json
import os
import sys

import pytest

from rewardhub.datasets import MISSING
from rewardhub.datasets import answer_of
from rewardhub.datasets import count_rows
from rewardhub.datasets import iter_rows
from rewardhub.datasets import prompt_of
from rewardhub.datasets import to_sample
from rewardhub.errors import UsageError

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def verl_rows(n: int = 6) -> list[dict]:
    """Rows as verl's gsm8k preprocessing writes them, plus a response (odd rows answer wrongly)."""
    return [{"data_source": "openai/gsm8k", "ability": "math",
             "prompt": [{"role": "user", "content": f"What is {i} + 1?"}],
             "reward_model": {"style": "rule", "ground_truth": str(i + 1)},
             "extra_info": {"index": i, "split": "train"},
             "response": f"so the answer is \\boxed{{{i + 1 if i % 2 == 0 else 0}}}"} for i in range(n)]


def write_all(tmp_path, rows):
    """The same rows as JSONL, parquet and a datasets save_to_disk folder."""
    datasets = pytest.importorskip("datasets")
    jsonl = tmp_path / "d.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    parquet = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pylist(rows), parquet)
    folder = tmp_path / "d_hf"
    datasets.Dataset.from_list(rows).save_to_disk(str(folder))
    return str(jsonl), str(parquet), str(folder)


def test_jsonl_parquet_and_save_to_disk_give_the_same_rows(tmp_path):
    rows = verl_rows(10)
    paths = write_all(tmp_path, rows)
    for path in paths:
        got = list(iter_rows(path, batch_rows=3))  # several record batches
        assert [r.data for r in got] == rows, path
        assert [r.number for r in got] == list(range(1, 11))
        assert count_rows(path) == 10
    both = list(iter_rows(list(paths[:2])))
    assert len(both) == 20 and both[10].file == paths[1] and both[10].number == 1


def test_row_formats_and_keys():
    from rewardhub.datasets import Row

    verl = Row("f", 1, verl_rows(1)[0])
    assert prompt_of(verl) == [{"role": "user", "content": "What is 0 + 1?"}]
    assert answer_of(verl) == "1"
    sample = to_sample(verl)
    assert sample["ground_truth"] == "1" and sample["extra_info"]["index"] == 0
    plain = Row("f", 2, {"question": "2+2?", "answer": "4"})
    assert prompt_of(plain) == "2+2?" and answer_of(plain) == "4"
    assert to_sample(plain)["prompt"] == "2+2?" and to_sample(plain)["extra_info"] == {}
    other = Row("f", 3, {"q": "x", "sol": {"final": "7"}})
    assert prompt_of(other, "q") == "x" and answer_of(other, "sol.final") == "7"
    assert answer_of(other) is MISSING
    assert to_sample(other, prompt_key="q", answer_key="sol.final")["ground_truth"] == "7"


@pytest.mark.parametrize(
    "case",
    [
        "missing_column",
        "empty",
        "not_text",
        "bad_parquet",
        "not_utf8",
        "not_object",
        "missing_file",
        "bad_folder",
    ],
)
def test_bad_data_is_one_error_naming_file_and_row(tmp_path, case):
    from rewardhub.datasets import Row

    path = tmp_path / ("d.parquet" if case == "bad_parquet" else "d.jsonl")
    if case == "missing_column":
        path.write_text(json.dumps({"question": "a"}) + "\n" + json.dumps({"text": "b"}) + "\n")
        rows = list(iter_rows(str(path)))
        prompt_of(rows[0])
        with pytest.raises(
            UsageError, match=r"(?s)d\.jsonl, row 2: no column 'prompt' or 'question'.*data\.prompt_key"
        ):
            prompt_of(rows[1])
        return
    if case == "not_text":
        pq.write_table(pa.Table.from_pylist([{"prompt": 5}, {"prompt": 6}]), tmp_path / "n.parquet")
        rows = list(iter_rows(str(tmp_path / "n.parquet")))
        with pytest.raises(
            UsageError, match=r"n\.parquet, row 2, column 'prompt': the prompt is neither text nor chat"
        ):
            prompt_of(rows[1])
        with pytest.raises(UsageError, match="neither text nor chat"):
            prompt_of(Row("f", 1, {"prompt": [{"role": "user"}]}))  # a message without content
        return
    expected = {
        "empty": r"d\.jsonl: the file has no rows",
        "bad_parquet": r"d\.parquet: cannot be read as parquet",
        "not_utf8": r"d\.jsonl, row 2: not UTF-8",
        "not_object": r"d\.jsonl, row 1: a JSON list, not an object",
        "missing_file": r"data: no such file or folder .*nope\.jsonl",
        "bad_folder": r"d_dir: a folder, but not one saved by datasets' save_to_disk",
    }[case]
    target = str(path)
    if case == "empty":
        path.write_text("\n\n")
    elif case == "bad_parquet":
        path.write_bytes(b"PAR1 this is not really parquet")
    elif case == "not_utf8":
        path.write_bytes(b'{"prompt": "ok"}\n{"prompt": "caf\xe9"}\n')
    elif case == "not_object":
        path.write_text("[1, 2]\n")
    elif case == "missing_file":
        target = str(tmp_path / "nope.jsonl")
    elif case == "bad_folder":
        (tmp_path / "d_dir").mkdir()
        target = str(tmp_path / "d_dir")
    with pytest.raises(UsageError, match=expected) as info:
        list(iter_rows(target))
    assert "Traceback" not in str(info.value)


def test_reading_is_streamed(tmp_path):
    """A big parquet file is read one record batch at a time: the first rows come before the rest is
    decoded."""
    n = 200_000
    pq.write_table(pa.table({"prompt": [f"q{i}" for i in range(n)], "answer": list(range(n))}),
                   tmp_path / "big.parquet", row_group_size=10_000)
    it = iter_rows(str(tmp_path / "big.parquet"), batch_rows=1000)
    before = pa.total_allocated_bytes()
    first = [next(it) for _ in range(10)]
    held = pa.total_allocated_bytes() - before
    assert first[-1].data == {"prompt": "q9", "answer": 9}
    assert held < 4_000_000  # one row group's buffers, not the ~3 MB x 2 columns of the whole file
    assert sum(1 for _ in it) == n - 10


def test_score_reads_verl_rows_from_every_format(cli, tmp_path):
    """verl's reward_model.ground_truth reaches the reward (no silent None); a row without one is a per-row
    error; the output is parquet by extension."""
    rows = verl_rows(6)
    rows[5] = {k: v for k, v in rows[5].items() if k != "reward_model"}  # no ground truth
    cfg = tmp_path / "c.yaml"
    cfg.write_text("reward:\n  rewards:\n    - name: math_verify\n")
    for path in write_all(tmp_path, rows):
        out = tmp_path / (os.path.basename(path) + ".out.parquet")
        res = cli("score", str(cfg), path, "-o", str(out))
        assert res.returncode == 0, res.stderr
        got = pq.read_table(out).to_pylist()
        assert [r["score"] for r in got] == [1.0, 0.0, 1.0, 0.0, 1.0, None]
        assert got[0]["reward_model"] == rows[0]["reward_model"] and got[0]["prompt"] == rows[0]["prompt"]
        assert "ground_truth" not in got[0]  # the input's columns, unchanged, and the results: nothing else
        assert "no ground truth" in json.loads(got[5]["errors"])["math_verify"]
        assert got[0]["errors"] is None
        line = next(ln for ln in res.stdout.splitlines() if ln.startswith("math_verify"))
        assert line.split()[3:5] == ["5", "1"]  # count, errors
    out = tmp_path / "o.jsonl"
    res = cli("score", str(cfg), str(tmp_path / "d.parquet"), "-o", str(out))
    assert res.returncode == 0, res.stderr
    assert [json.loads(x)["score"] for x in out.read_text().splitlines()] == [1.0, 0.0, 1.0, 0.0, 1.0, None]


def test_score_bad_data_is_one_error_line(cli, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("reward:\n  rewards:\n    - name: math_verify\n")
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not parquet")
    res = cli("score", str(cfg), str(bad))
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.startswith(f"ERROR: {bad}: cannot be read as parquet") and "Traceback" not in res.stderr
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"prompt": "q", "response": "a"}) + "\n" + json.dumps({"prompt": "q"}) + "\n")
    res = cli("score", str(cfg), str(data), "-o", str(tmp_path / "o.jsonl"))
    assert res.returncode == 2 and f"ERROR: {data}, row 2: no 'response' column" in res.stderr


def test_import_rewardhub_datasets_stays_light():
    import subprocess

    code = ("import sys, rewardhub, rewardhub.datasets; "
            "print([m for m in ('pyarrow', 'torch', 'ray', 'datasets') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
