"""`rewardhub score` reads what it is given as it is: pipes and stdin without losing a byte, files by
their content (gzip, parquet under any name), and never writes its output into what it reads."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import textwrap

import pytest

from rewardhub.cli import main

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

#: rows long enough that the first 4 KiB of the file hold several of them
ROWS = [{"response": "x" * (i % 7 + 1), "i": i, "pad": "p" * 120} for i in range(100)]


@pytest.fixture
def cfg(tmp_path):
    reward = tmp_path / "r.py"
    reward.write_text("def compute_score(*, response, **kw):\n    return float(len(response))\n")
    path = tmp_path / "c.yaml"
    path.write_text(f"reward:\n  rewards:\n    - path: {reward}\n")
    return str(path)


def _text(rows=ROWS) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def _parquet_bytes(tmp_path, rows=ROWS) -> bytes:
    path = tmp_path / "src.parquet.bin"
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path.read_bytes()


def _score(*args, stdin=None, shell=False):
    cmd = [sys.executable, "-m", "rewardhub", "score", *args]
    if shell:  # one bash command line, for process substitution
        cmd = ["bash", "-c", args[0].replace("REWARDHUB", f"{sys.executable} -m rewardhub")]
    return subprocess.run(cmd, input=stdin, capture_output=True, timeout=120)


def _ids(out) -> list[int]:
    if str(out).endswith(".parquet"):
        return [r["i"] for r in pq.ParquetFile(out).read().to_pylist()]
    with open(out, encoding="utf-8") as f:
        return [json.loads(line)["i"] for line in f]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("content", ["jsonl", "gzip_jsonl", "parquet", "gzip_parquet"])
def test_a_pipe_loses_nothing(tmp_path, cfg, content):
    body = {"jsonl": _text(), "gzip_jsonl": gzip.compress(_text()), "parquet": _parquet_bytes(tmp_path),
            "gzip_parquet": gzip.compress(_parquet_bytes(tmp_path))}[content]
    src = tmp_path / "src.bin"
    src.write_bytes(body)
    out = tmp_path / "o.jsonl"
    res = _score(f"REWARDHUB score {cfg} <(cat {src}) -o {out}", shell=True)
    assert res.returncode == 0, res.stderr.decode()
    assert _ids(out) == list(range(100))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("content", ["jsonl", "gzip_jsonl", "parquet"])
def test_stdin_loses_nothing(tmp_path, cfg, content):
    body = {"jsonl": _text(), "gzip_jsonl": gzip.compress(_text()), "parquet": _parquet_bytes(tmp_path)}[
        content
    ]
    out = tmp_path / "o.parquet"
    res = _score(cfg, "-", "-o", str(out), stdin=body)
    assert res.returncode == 0, res.stderr.decode()
    assert _ids(out) == list(range(100))


@pytest.mark.parametrize("name,content", [("d.jsonl.gz", "gzip"), ("d.jsonl", "gzip"), ("d.jsonl", "parquet"),
                                          ("d.parquet", "jsonl"), ("d.data", "parquet"), ("d.jsonl", "bom"),
                                          ("d.jsonl.bz2", "bz2"), ("d.jsonl.xz", "xz")])
def test_files_are_read_by_their_content(tmp_path, cfg, name, content, capsys):
    import bz2
    import lzma

    body = {
        "gzip": gzip.compress(_text()),
        "parquet": _parquet_bytes(tmp_path),
        "jsonl": _text(),
        "bom": b"\xef\xbb\xbf" + _text(),
        "bz2": bz2.compress(_text()),
        "xz": lzma.compress(_text()),
    }[content]
    (tmp_path / name).write_bytes(body)
    out = tmp_path / "o.jsonl"
    assert main(["score", cfg, str(tmp_path / name), "-o", str(out)]) == 0, capsys.readouterr().err
    assert _ids(out) == list(range(100))


@pytest.mark.parametrize("content,says", [
    (b"PK\x03\x04" + b"\0" * 40, "a zip-compressed file, which rewardhub does not open"),
    (b"\x28\xb5\x2f\xfd" + b"\0" * 40, "a zstd-compressed file"),
    (gzip.compress(b"caf\xe9\n", mtime=0), "not UTF-8"),
    (gzip.compress(_text())[:300], "cannot be read as gzip"),
    (b"\xff\xfe{\x00\"\x00", "UTF-16"),
])
def test_what_cannot_be_read_is_named(tmp_path, cfg, content, says, capsys):
    data = tmp_path / "d.jsonl"
    data.write_bytes(content)
    assert main(["score", cfg, str(data)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ERROR: {data}") and says in err and "Traceback" not in err, err
    assert "iconv -f latin1" not in err or says == "not UTF-8"


def test_output_that_is_one_of_the_files_of_a_glob_is_refused(tmp_path, cfg, capsys):
    (tmp_path / "in").mkdir()
    for k in range(2):
        (tmp_path / "in" / f"part{k}.jsonl").write_bytes(_text())
    target = tmp_path / "in" / "part1.jsonl"
    before = target.read_bytes()
    assert main(["score", cfg, str(tmp_path / "in" / "*.jsonl"), "-o", str(target)]) == 2
    assert "is the same file as an input" in capsys.readouterr().err
    assert target.read_bytes() == before


@pytest.mark.parametrize("where", ["a_shard", "a_new_file", "summary"])
def test_output_inside_the_folder_read_is_refused(tmp_path, cfg, where, capsys):
    datasets = pytest.importorskip("datasets")
    folder = tmp_path / "hf"
    datasets.Dataset.from_list(ROWS).save_to_disk(str(folder))
    shard = sorted(p for p in os.listdir(folder) if p.endswith(".arrow"))[0]
    before = {p: (folder / p).read_bytes() for p in os.listdir(folder)}
    target = folder / (shard if where == "a_shard" else "scored.jsonl")
    flag = "--summary-json" if where == "summary" else "-o"
    assert main(["score", cfg, str(folder), flag, str(target)]) == 2
    err = capsys.readouterr().err
    assert f"{flag} {str(target)!r} is " in err and ("inside the folder" in err or "same file" in err), err
    assert {p: (folder / p).read_bytes() for p in os.listdir(folder)} == before


@pytest.mark.timeout(60)
def test_a_shard_truncated_while_read_is_an_error_not_a_bus_error(tmp_path):
    """The arrow shards are read, not memory-mapped: a shard cut short under the reader is an ERROR."""
    shard = tmp_path / "data-00000-of-00001.arrow"
    table = pa.table({"response": [f"r{i}" * 50 for i in range(20_000)]})
    with pa.OSFile(str(shard), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=1000):
            writer.write_batch(batch)
    script = textwrap.dedent(f"""
        import os
        from rewardhub.datasets import iter_rows
        from rewardhub.errors import UsageError
        rows = iter_rows({str(shard)!r}, batch_rows=1000)
        next(rows)
        os.truncate({str(shard)!r}, os.path.getsize({str(shard)!r}) // 3)
        try:
            n = 1 + sum(1 for _ in rows)
        except UsageError as exc:
            print("ERROR:", str(exc).splitlines()[0])
        else:
            print("rows", n)
    """)
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=50)
    assert res.returncode == 0, (res.returncode, res.stderr)
    assert res.stdout.startswith(f"ERROR: {shard}: cannot be read as arrow"), res.stdout


def test_sighup_stops_like_sigterm_unless_ignored():
    import signal as sig

    from rewardhub._commands._output import stop_on_signals
    from rewardhub.errors import Interrupted

    before = sig.getsignal(sig.SIGHUP)
    try:
        sig.signal(sig.SIGHUP, sig.SIG_DFL)
        with stop_on_signals(), pytest.raises(Interrupted) as info:
            os.kill(os.getpid(), sig.SIGHUP)
            for _ in range(1000):  # the handler runs between bytecodes
                pass
        assert info.value.signal_name == "SIGHUP" and info.value.signum == sig.SIGHUP
        assert sig.getsignal(sig.SIGHUP) == sig.SIG_DFL
        sig.signal(sig.SIGHUP, sig.SIG_IGN)  # as under nohup: the run goes on
        with stop_on_signals():
            assert sig.getsignal(sig.SIGHUP) == sig.SIG_IGN
    finally:
        sig.signal(sig.SIGHUP, before)
