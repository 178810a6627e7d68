"""`rewardhub score` never drops or alters what came in: every input column comes out with its values
unchanged (in JSONL and in parquet, whose columns are widened as later rows need), or the run is one
ERROR and the output is left as it was."""

from __future__ import annotations

import datetime
import decimal
import json
import os
from pathlib import Path

import pytest

from rewardhub.cli import main

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

#: rows past the first chunk: a column that changes there is seen by a later chunk than the first
LATE = 301


@pytest.fixture
def cfg(tmp_path):
    reward = tmp_path / "r.py"
    reward.write_text("def compute_score(*, response, **kw):\n    return float(len(response))\n")
    path = tmp_path / "c.yaml"
    path.write_text(f"reward:\n  rewards:\n    - path: {reward}\n")
    return str(path)


def _jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _read(out: Path) -> list[dict]:
    if out.suffix == ".parquet":
        return pq.ParquetFile(out).read().to_pylist()
    return [json.loads(line) for line in out.read_text().splitlines()]


def _same(given, got) -> bool:
    """``got`` holds ``given``: equal values (an integer widened to a double is equal), objects with every
    key of ``given`` (a parquet struct widened by later rows has the other keys null)."""
    if isinstance(given, dict):
        return isinstance(got, dict) and all(k in got and _same(v, got[k]) for k, v in given.items()) \
            and all(got[k] is None for k in set(got) - set(given))
    if isinstance(given, list):
        return isinstance(got, list) and len(given) == len(got) and all(map(_same, given, got))
    if isinstance(given, float) and given != given:
        return isinstance(got, float) and got != got
    return type(given) is type(got) or (isinstance(given, int) and isinstance(got, float)) \
        if given == got else False


def _assert_kept(rows: list[dict], got: list[dict]) -> None:
    assert len(got) == len(rows)
    for i, (r, g) in enumerate(zip(rows, got)):
        for k, v in r.items():
            assert k in g and _same(v, g[k]), (i + 1, k, v, g.get(k))
        assert g["score"] == float(len(r["response"]))


def _cases() -> dict[str, list[dict]]:
    n = LATE + 40
    base = [{"response": "x" * (i % 5 + 1), "i": i} for i in range(n)]
    return {
        "column_first_at_row_301": [
            {**r, **({"late": f"v{i}"} if i >= LATE - 1 else {})} for i, r in enumerate(base)
        ],
        "struct_gains_keys": [
            {**r, "info": {"a": i, **({"b": [i], "c": {"d": "e"}} if i >= LATE else {})}}
            for i, r in enumerate(base)
        ],
        "int_then_float": [{**r, "x": i if i < LATE else i + 0.5} for i, r in enumerate(base)],
        "nulls_then_values": [
            {**r, "x": None if i < LATE else f"s{i}", "y": None if i < LATE else {"k": i}}
            for i, r in enumerate(base)
        ],
        "nested_lists_widen": [
            {**r, "m": [[i, i + 1]] if i < LATE else [[i + 0.25], []]} for i, r in enumerate(base)
        ],
        "empty_lists_then_structs": [
            {**r, "l": [] if i < LATE else [{"k": i, "v": None}]} for i, r in enumerate(base)
        ],
        "no_extra_info": [{"response": "abc"}, {"response": "de"}],
        "empty_object_then_keys": [
            {**r, "extra_info": {} if i < LATE else {"index": i}} for i, r in enumerate(base)
        ],
        "wide_rows": [{"response": "r", **{f"c{j}": j * k for j in range(1500)}} for k in range(3)],
        "values_of_every_kind": [
            {
                "response": "é漢🙂",
                "b": True,
                "f": -0.0,
                "neg": -(2**63),
                "big": 2**63 - 1,
                "s": "",
                "n": None,
                "nested": {"a": [{"b": [1, 2]}]},
            }
            for _ in range(3)
        ],
        "ground_truth_and_verl_answer_both_kept": [
            {"response": "1", "ground_truth": "a", "reward_model": {"ground_truth": "b"}, "data_source": None}
        ],
    }


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
@pytest.mark.parametrize("case", sorted(_cases()))
def test_every_input_column_comes_out_unchanged(tmp_path, cfg, case, fmt, capsys):
    rows = _cases()[case]
    data = _jsonl(tmp_path / "d.jsonl", rows)
    out = tmp_path / f"o.{fmt}"
    assert main(["score", cfg, data, "-o", str(out)]) == 0, capsys.readouterr().err
    _assert_kept(rows, _read(out))


def test_parquet_input_of_every_type_comes_out_unchanged(tmp_path, cfg, capsys):
    n = 5
    table = pa.table(
        {
            "response": pa.array(["a", "bb", "ccc", "dddd", "e"]),
            "i32": pa.array(range(n), pa.int32()),
            "u64": pa.array([2**64 - 1 - i for i in range(n)], pa.uint64()),
            "f32": pa.array([0.5] * n, pa.float32()),
            "when": pa.array(
                [datetime.datetime(2024, 1, i + 1, 12, 30) for i in range(n)], pa.timestamp("ms")
            ),
            "when_tz": pa.array(
                [datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)] * n, pa.timestamp("us", "UTC")
            ),
            "day": pa.array([datetime.date(2020, 2, 29)] * n, pa.date32()),
            "raw": pa.array([bytes([i, 0, 255]) for i in range(n)], pa.binary()),
            "money": pa.array([decimal.Decimal("1.25")] * n, pa.decimal128(10, 2)),
            "nested": pa.array([[{"k": i, "v": [str(i)]}] for i in range(n)]),
            "nothing": pa.nulls(n),
            "large": pa.array(["t"] * n, pa.large_string()),
        }
    )
    data = tmp_path / "d.parquet"
    pq.write_table(table, data)
    out = tmp_path / "o.parquet"
    assert main(["score", cfg, str(data), "-o", str(out)]) == 0, capsys.readouterr().err
    _assert_kept(table.to_pylist(), _read(out))


@pytest.mark.parametrize(
    "case",
    [
        "int_beyond_64_bits",
        "numbers_then_text",
        "precise_int_then_float",
        "always_empty_object",
        "naive_then_tz_time",
        "text_then_bytes",
        "bool_then_int",
        "list_then_scalar",
    ],
)
def test_what_parquet_cannot_hold_is_one_error_and_no_output(tmp_path, cfg, case, capsys):
    rows = [{"response": "x", "i": i} for i in range(LATE + 5)]
    column = {"int_beyond_64_bits": "big", "numbers_then_text": "v", "precise_int_then_float": "p",
              "always_empty_object": "extra_info", "naive_then_tz_time": "t", "text_then_bytes": "t",
              "bool_then_int": "b", "list_then_scalar": "l"}[case]
    for i, r in enumerate(rows):
        if case == "int_beyond_64_bits":
            r["big"] = 2 ** 70 if i == LATE else i
        elif case == "numbers_then_text":
            r["v"] = i if i < LATE else "text"
        elif case == "precise_int_then_float":
            r["p"] = 2 ** 60 + 1 if i < LATE else 0.5
        elif case == "always_empty_object":
            r["extra_info"] = {}
        elif case == "bool_then_int":
            r["b"] = True if i < LATE else 1
        elif case == "list_then_scalar":
            r["l"] = [i] if i < LATE else i
    if case == "text_then_bytes":
        (tmp_path / "in").mkdir()
        pq.write_table(pa.table({"response": ["x"], "t": pa.array(["text"])}), tmp_path / "in" / "d.parquet")
        pq.write_table(
            pa.table({"response": ["z"], "t": pa.array([b"bytes"])}), tmp_path / "in" / "e.parquet"
        )
        data_arg, rows = str(tmp_path / "in" / "*.parquet"), None
    elif case == "naive_then_tz_time":
        (tmp_path / "in").mkdir()
        pq.write_table(pa.table({"response": ["x", "y"], "t": pa.array([datetime.datetime(2024, 1, 1)] * 2)}),
                       tmp_path / "in" / "d.parquet")
        pq.write_table(
            pa.table(
                {"response": ["z"], "t": pa.array([datetime.datetime(2024, 1, 1)], pa.timestamp("us", "UTC"))}
            ),
            tmp_path / "in" / "e.parquet",
        )
        data_arg, rows = str(tmp_path / "in" / "*.parquet"), None
    else:
        data_arg = _jsonl(tmp_path / "d.jsonl", rows)
    out = tmp_path / "o.parquet"
    out.write_bytes(b"earlier")
    assert main(["score", cfg, data_arg, "-o", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ERROR: -o {out}: column {column!r}") and "Traceback" not in err, err
    assert "write JSONL instead" in err
    assert out.read_bytes() == b"earlier" and sorted(os.listdir(tmp_path)) == sorted(
        p for p in os.listdir(tmp_path) if not p.startswith("."))
    if rows is not None:  # the same rows to JSONL: kept exactly
        jout = tmp_path / "o.jsonl"
        assert main(["score", cfg, data_arg, "-o", str(jout)]) == 0
        _assert_kept(rows, _read(jout))


def test_two_parquet_columns_of_one_name_are_an_error(tmp_path, cfg, capsys):
    data = tmp_path / "d.parquet"
    pq.write_table(
        pa.Table.from_arrays([pa.array(["a"]), pa.array([1]), pa.array([2])], names=["response", "x", "x"]),
        data,
    )
    assert main(["score", cfg, str(data)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ERROR: {data}: two columns named 'x'"), err


@pytest.mark.parametrize("flag", ["--answer-key", "--prompt-key"])
def test_a_key_that_names_no_column_is_an_error_naming_the_columns(tmp_path, cfg, flag, capsys):
    data = _jsonl(
        tmp_path / "d.jsonl", [{"response": "a", "ground_truth": "1", "reward_model": {"ground_truth": "2"}}]
    )
    assert main(["score", cfg, data, flag, "solution"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ERROR: {flag} 'solution': {data}, row 1 has no such column"), err
    assert "response, ground_truth, reward_model, reward_model.ground_truth" in err


def test_answer_key_leaves_the_rows_ground_truth_as_it_was(tmp_path, capsys):
    reward = tmp_path / "r.py"
    reward.write_text(
        "def compute_score(*, response, ground_truth, **kw):\n    return float(response == ground_truth)\n"
    )
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"reward:\n  rewards:\n    - path: {reward}\n")
    rows = [{"response": "7", "ground_truth": "old", "sol": {"final": "7"}}]
    out = tmp_path / "o.jsonl"
    assert (
        main(
            [
                "score",
                str(cfg),
                _jsonl(tmp_path / "d.jsonl", rows),
                "--answer-key",
                "sol.final",
                "-o",
                str(out),
            ]
        )
        == 0
    )
    got = _read(out)
    assert got[0]["score"] == 1.0 and got[0]["ground_truth"] == "old"


def test_namespace_that_is_an_input_column_is_refused(tmp_path, cfg, capsys):
    data = _jsonl(tmp_path / "d.jsonl", [{"response": "a", "rh": 1}])
    assert main(["score", cfg, data, "--namespace", "rh"]) == 2
    assert "row 1 has a field 'rh', the --namespace" in capsys.readouterr().err


def test_namespace_results_in_parquet(tmp_path, cfg, capsys):
    out = tmp_path / "o.parquet"
    data = _jsonl(tmp_path / "d.jsonl", [{"response": "a", "score": 7, "extra": "x"}])
    assert main(["score", cfg, data, "--namespace", "rh", "-o", str(out)]) == 0, capsys.readouterr().err
    got = _read(out)[0]
    assert (
        got["score"] == 7
        and got["extra"] == "x"
        and got["rh"]["score"] == 1.0
        and json.loads(got["rh"]["extra"]) == {}
    )


def test_summary_json_of_a_run_where_every_row_failed_is_valid_json(tmp_path, capsys):
    reward = tmp_path / "r.py"
    reward.write_text("def compute_score(*, response, ground_truth, **kw):\n    return 1.0\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"reward:\n  rewards:\n    - path: {reward}\n")
    summary = tmp_path / "s.json"  # no row has a ground truth: every row fails, no mean
    data = _jsonl(tmp_path / "d.jsonl", [{"response": "a"}, {"response": "b"}])
    # every call of the reward failed: the run fails (exit 1), and its rows and summary are written
    assert (
        main(["score", str(cfg), data, "-o", str(tmp_path / "o.jsonl"), "--summary-json", str(summary)]) == 1
    )
    assert "ERROR: reward 'compute_score' failed on 2 of 2 rows" in capsys.readouterr().err
    assert (tmp_path / "o.jsonl").exists()

    def no_constants(name):
        raise AssertionError(f"{name} in the summary JSON")

    got = json.loads(summary.read_text(), parse_constant=no_constants)
    assert got["metrics"]["reward/mean"] is None and got["samples"] == 2


@pytest.mark.parametrize("line,key", [('{"response": "a", "x": 1, "x": 2}', "x"),
                                      ('{"response": "a", "info": {"k": 1, "k": null}}', "k")])
def test_a_jsonl_key_given_twice_is_an_error(tmp_path, cfg, line, key, capsys):
    data = tmp_path / "d.jsonl"
    data.write_text('{"response": "ok"}\n' + line + "\n")
    assert main(["score", cfg, str(data)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ERROR: {data}, row 2: the key {key!r} appears twice in one object"), err
