"""What a reward's source declares, read without importing it, and kept on disk per file (issue 44 §4:
parsing the lazy entry points' files was a tenth of `rewardhub list`): the same answers from the cache as
from a parse, a changed file parsed again, a damaged cache file read past."""

from __future__ import annotations

import io
import json
import os
from contextlib import redirect_stdout

import pytest

from rewardhub import _source_facts
from rewardhub._source_facts import UNREADABLE
from rewardhub._source_facts import static_docstring
from rewardhub._source_facts import static_meta
from rewardhub._source_facts import static_params

SOURCE = '''
from rewardhub import reward

@reward(timeout_s=5, pure=True, capabilities=("sandbox",), data_sources=["gsm8k"])
def declared(response, ground_truth, *, extra_info=None):
    """Declared with literals.

    More text."""
    return 1.0

@reward(timeout_s=LIMIT)
def computed(response):
    return 1.0

def plain(messages, **kw):
    """Plain dict metadata."""
    return 1.0
plain.__rewardhub__ = {"timeout_s": 2.5, "executor": "thread", "extra": {1: b"x", 2: None}}

def huge(response):
    return 1.0
huge.__rewardhub__ = {"timeout_s": 1e999}

class Scorer:
    """A class."""
'''

ATTRS = ("declared", "computed", "plain", "huge", "Scorer", "missing")


def _answers(path: str) -> dict[str, tuple]:
    return {a: (static_docstring(path, a), static_params(path, a), static_meta(path, a)) for a in ATTRS}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh cache folder, read afresh as by a new process."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("REWARDHUB_NO_CACHE", raising=False)
    monkeypatch.setattr(_source_facts, "_memo", None)
    return tmp_path / "cache" / "rewardhub"


def _new_process(monkeypatch):
    _source_facts.flush()  # what the last one did at exit
    monkeypatch.setattr(_source_facts, "_memo", None)
    _source_facts._parsed_at.cache_clear()


def test_the_cache_answers_what_a_parse_answers_without_parsing(tmp_path, cache, monkeypatch):
    src = tmp_path / "rewards.py"
    src.write_text(SOURCE)
    monkeypatch.setenv("REWARDHUB_NO_CACHE", "1")
    parsed = _answers(str(src))
    assert parsed["declared"] == ("Declared with literals.", {"response", "ground_truth", "extra_info"},
                                  {"timeout_s": 5, "pure": True, "capabilities": ("sandbox",),
                                   "data_sources": ["gsm8k"]})
    assert parsed["computed"][2] == UNREADABLE
    assert parsed["plain"] == ("Plain dict metadata.", {"messages"},
                               {"timeout_s": 2.5, "executor": "thread", "extra": {1: b"x", 2: None}})
    assert parsed["huge"][2] == {"timeout_s": float("inf")}
    assert parsed["Scorer"] == ("A class.", None, None) and parsed["missing"] == ("", None, None)
    assert not cache.exists()

    monkeypatch.delenv("REWARDHUB_NO_CACHE")
    assert _answers(str(src)) == parsed  # parsed, and remembered
    _new_process(monkeypatch)
    parses = []
    real = _source_facts._parsed_at.__wrapped__
    monkeypatch.setattr(_source_facts, "_parsed_at", lambda *a: parses.append(a) or real(*a))
    again = _answers(str(src))
    assert again == parsed
    assert [type(v) for v in again["declared"][2].values()] == [int, bool, tuple, list]
    # only `huge` is parsed again: its metadata's repr (inf) is no literal, so it is not kept
    assert {a[0] for a in parses} == {str(src)} and len(parses) == 3  # its docstring, params, meta


def test_a_changed_file_is_parsed_again(tmp_path, cache, monkeypatch):
    src = tmp_path / "rewards.py"
    src.write_text(SOURCE)
    assert static_docstring(str(src), "plain") == "Plain dict metadata."
    src.write_text(SOURCE.replace("Plain dict metadata.", "Plain dict metadata, edited."))
    _new_process(monkeypatch)
    assert static_docstring(str(src), "plain") == "Plain dict metadata, edited."
    # the same size, another modification time: parsed again too
    src.write_text(SOURCE.replace("Plain dict metadata.", "Plain dict metadata!"))
    stamp = os.stat(src).st_mtime_ns + 10**9
    os.utime(src, ns=(stamp, stamp))
    _new_process(monkeypatch)
    assert static_docstring(str(src), "plain") == "Plain dict metadata!"
    assert static_params(str(tmp_path / "gone.py"), "plain") is None


@pytest.mark.parametrize("content", [
    "not json",
    json.dumps(["a list"]),
    "{FILE: {\"stamp\": STAMP, \"attrs\": {\"plain\": [\"wrong\", [\"x\"], \"{'timeout_s': 1\"]}}}",
    "{FILE: {\"stamp\": STAMP, \"attrs\": {\"plain\": [\"wrong\", 3, \"None\"]}}}",
    "{FILE: {\"stamp\": [1], \"attrs\": {}}}",
])
def test_a_damaged_cache_file_is_read_past(tmp_path, cache, monkeypatch, content):
    src = tmp_path / "rewards.py"
    src.write_text(SOURCE)
    st = os.stat(src)
    cache.mkdir(parents=True)
    file = cache / os.path.basename(_source_facts._cache_path())
    file.write_text(content.replace("FILE", json.dumps(str(src)))
                    .replace("STAMP", json.dumps([st.st_mtime_ns, st.st_size])))
    monkeypatch.setenv("REWARDHUB_NO_CACHE", "1")
    parsed = _answers(str(src))
    monkeypatch.delenv("REWARDHUB_NO_CACHE")
    assert _answers(str(src)) == parsed
    _new_process(monkeypatch)
    assert _answers(str(src)) == parsed  # from the file rewritten by the first pass
    assert str(src) in json.loads(file.read_text())


@pytest.mark.timeout(60)
def test_threads_asking_at_once_get_their_answers_and_leave_a_whole_file(tmp_path, cache, monkeypatch):
    from concurrent.futures import ThreadPoolExecutor

    files = []
    for i in range(16):
        src = tmp_path / f"rewards_{i}.py"
        src.write_text(SOURCE.replace("Plain dict metadata.", f"Reward {i}."))
        files.append(str(src))
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda f: static_docstring(f, "plain"), files))
    assert got == [f"Reward {i}." for i in range(16)]
    _source_facts.flush()
    written = json.loads((cache / os.path.basename(_source_facts._cache_path())).read_text())
    assert set(written) == set(files)


def test_one_cache_file_per_environment_pruned_like_the_entry_point_caches(tmp_path, cache, monkeypatch):
    src = tmp_path / "rewards.py"
    src.write_text(SOURCE)
    cache.mkdir(parents=True)
    for i in range(3):  # the files of three other environments, oldest first
        old = cache / f"source-facts-old{i}.json"
        old.write_text("{}")
        os.utime(old, (1_000_000 + i, 1_000_000 + i))
    (cache / "entry-points-other.json").write_text("{}")  # another kind: not pruned with these
    monkeypatch.setenv("REWARDHUB_CACHE_KEEP", "2")
    assert static_docstring(str(src), "plain") == "Plain dict metadata."
    _source_facts.flush()
    mine = os.path.basename(_source_facts._cache_path())
    assert sorted(p.name for p in cache.iterdir()) == sorted(
        [mine, "source-facts-old2.json", "entry-points-other.json"])
    monkeypatch.syspath_prepend(str(tmp_path))  # another environment: another file
    assert os.path.basename(_source_facts._cache_path()) != mine


def test_a_cold_cache_is_written_and_pruned_once_per_process_not_once_per_answer(tmp_path, cache,
                                                                                monkeypatch):
    writes = []
    real = _source_facts.write_cache
    monkeypatch.setattr(_source_facts, "write_cache", lambda *a: writes.append(a) or real(*a))
    for i in range(3):
        src = tmp_path / f"rewards_{i}.py"
        src.write_text(SOURCE)
        _answers(str(src))  # five answers kept per file
    _source_facts.flush()
    _source_facts.flush()  # nothing new: not written again
    assert len(writes) == 1
    assert len(json.loads((cache / os.path.basename(_source_facts._cache_path())).read_text())) == 3


def test_rewardhub_list_says_the_same_with_a_cold_a_warm_and_no_cache(cache, monkeypatch):
    from rewardhub.cli import main

    def listed() -> str:
        _new_process(monkeypatch)
        out = io.StringIO()
        with redirect_stdout(out):
            assert main(["list", "--json"]) == 0
        return out.getvalue()

    monkeypatch.setenv("REWARDHUB_NO_CACHE", "1")
    uncached = listed()
    monkeypatch.delenv("REWARDHUB_NO_CACHE")
    assert listed() == uncached  # cold
    _source_facts.flush()  # at exit
    assert (cache / os.path.basename(_source_facts._cache_path())).exists()
    assert listed() == uncached  # warm
    assert any(row["source"] == "entry-point" and row["summary"] for row in json.loads(uncached))


def test_a_lazy_entry_points_module_is_found_once_per_row(monkeypatch):
    """`list` reads three things from a lazy entry point's source (policy, reads, summary): its module is
    looked up on sys.path once for them (a lookup per reading: a share of `list` with many entry points)."""
    from rewardhub._commands import _common
    from rewardhub.registry import build_registry

    lazy = [s for s in build_registry().list_rewards() if s.source == "entry-point" and s.status == "ok"]
    assert lazy
    looked = []
    real = _common.find_module_file
    monkeypatch.setattr(_common, "find_module_file", lambda m: looked.append(m) or real(m))
    rows = [_common.spec_row(s) for s in lazy]
    assert sorted(looked) == sorted(s.target.partition(":")[0] for s in lazy)
    assert all(row["summary"] and row["reads"] in ("text", "trajectory") for row in rows)
