"""`rewardhub score` at the edges: no input is ever destroyed, a stopped run keeps its rows, a
reward's exit or print is that reward's business only, and every input row keeps one result row."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

EXIT_REWARD = """
import os, sys
def compute_score(*, response, **kw):
    if response == "exit":
        sys.exit(3)
    if response == "kbd":
        raise KeyboardInterrupt
    print("printed by the reward")
    os.write(1, b"written to fd 1 by the reward\\n")
    return 1.0
"""


def _write(path, text):
    path.write_text(text)
    return str(path)


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.fixture
def simple(tmp_path):
    """A config with a file reward, and a data file of three rows."""
    reward = _write(
        tmp_path / "r.py", "def compute_score(*, response, **kw):\n    return float(len(response))\n"
    )
    cfg = _write(tmp_path / "c.yaml", f"reward:\n  rewards:\n    - path: {reward}\n")
    data = _jsonl(tmp_path / "d.jsonl", [{"response": "a"}, {"response": "bb"}, {"response": "ccc"}])
    return cfg, data


def _leftovers(folder):
    return sorted(p for p in os.listdir(folder) if p.endswith((".tmp", ".partial")) or ".partial." in p)


# ---- same file -----------------------------------------------------------------------------------

def test_output_same_as_data_is_refused_and_data_kept(cli, simple):
    cfg, data = simple
    before = Path(data).read_text()
    res = cli("score", cfg, data, "-o", data)
    assert res.returncode == 2
    assert res.stderr.startswith(f"ERROR: -o {data!r} is the same file as an input ({data!r})")
    assert Path(data).read_text() == before


def test_output_same_as_config_through_another_path_is_refused(cli, simple, tmp_path):
    cfg, data = simple
    link = tmp_path / "link.yaml"
    link.symlink_to(cfg)
    before = Path(cfg).read_text()
    res = cli("score", cfg, data, "-o", str(link))
    assert res.returncode == 2 and "is the same file as an input" in res.stderr
    assert Path(cfg).read_text() == before


@pytest.mark.parametrize("which", ["output", "data", "config"])
def test_summary_json_same_as_another_file_is_refused(cli, simple, tmp_path, which):
    cfg, data = simple
    out = tmp_path / "o.jsonl"
    out.write_text("kept\n")
    target = {"output": str(out), "data": data, "config": cfg}[which]
    before = Path(target).read_text()
    res = cli("score", cfg, data, "-o", str(out), "--summary-json", target)
    assert res.returncode == 2
    assert res.stderr.splitlines()[0].startswith(f"ERROR: --summary-json {target!r} is the same file as")
    assert Path(target).read_text() == before


# ---- validate first, write last ----------------------------------------------------------------

def test_existing_output_untouched_when_the_config_is_bad(cli, simple, tmp_path):
    _, data = simple
    bad = _write(tmp_path / "bad.yaml", "reward:\n  rewards:\n    - name: no_such_reward\n")
    out = tmp_path / "o.jsonl"
    out.write_text("earlier results\n")
    res = cli("score", bad, data, "-o", str(out))
    assert res.returncode == 1 and "no_such_reward" in res.stderr
    assert out.read_text() == "earlier results\n"
    assert _leftovers(tmp_path) == []


def test_failed_run_leaves_output_as_it_was(cli, tmp_path):
    reward = _write(
        tmp_path / "r.py",
        "def compute_score(*, response, **kw):\n"
        "    if response == 'bad':\n        raise ValueError('no')\n    return 1.0\n",
    )
    cfg = _write(tmp_path / "c.yaml", f"reward:\n  rewards:\n    - path: {reward}\n      on_failure: raise\n")
    data = _jsonl(tmp_path / "d.jsonl", [{"response": "ok"}, {"response": "bad"}])
    out = tmp_path / "o.jsonl"
    out.write_text("earlier results\n")
    res = cli("score", cfg, data, "-o", str(out))
    assert res.returncode == 1 and res.stderr.startswith(
        "ERROR: reward 'compute_score' on row 2: ValueError: no"
    )
    assert out.read_text() == "earlier results\n"
    assert _leftovers(tmp_path) == []


def test_new_output_appears_only_when_the_run_succeeds(cli, simple, tmp_path):
    cfg, data = simple
    out = tmp_path / "o.jsonl"
    res = cli("score", cfg, data, "-o", str(out))
    assert res.returncode == 0, res.stderr
    assert [json.loads(x)["score"] for x in out.read_text().splitlines()] == [1.0, 2.0, 3.0]
    assert _leftovers(tmp_path) == []


# ---- interrupted runs keep their rows ----------------------------------------------------------

@pytest.mark.timeout(120)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_interrupted_run_keeps_the_scored_rows(tmp_path, sig):
    from rewardhub._commands.score import FIRST_CHUNK

    reward = _write(
        tmp_path / "r.py",
        "import time\ndef compute_score(*, response, **kw):\n"
        "    if response == 'slow':\n        time.sleep(600)\n    return 1.0\n",
    )
    cfg = _write(tmp_path / "c.yaml", f"reward:\n  rewards:\n    - path: {reward}\n")
    slow_at = 3 * FIRST_CHUNK
    rows = (
        [{"response": "x", "i": i} for i in range(slow_at)]
        + [{"response": "slow"}]
        + [{"response": "y"}] * 10
    )
    data = _jsonl(tmp_path / "d.jsonl", rows)
    out = tmp_path / "o.jsonl"
    out.write_text("earlier results\n")
    # as from a terminal: SIGINT and SIGHUP not ignored (a test run in the background, or under
    # nohup, would pass its SIG_IGN on, and score rightly keeps an ignored SIGHUP ignored)
    def as_from_a_terminal() -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)

    proc = subprocess.Popen([sys.executable, "-m", "rewardhub", "score", cfg, data, "-o", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=as_from_a_terminal)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:  # wait until the first chunk is written
            tmp = [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]
            if tmp and os.path.getsize(tmp_path / tmp[0]) > 0:
                break
            time.sleep(0.05)
        time.sleep(0.5)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    kept = tmp_path / "o.jsonl.partial"
    assert proc.returncode == 128 + sig, err
    got = [json.loads(x) for x in kept.read_text().splitlines()]
    n = len(got)
    assert FIRST_CHUNK <= n <= slow_at  # whole chunks, all before the row that hangs
    assert [r["i"] for r in got] == list(range(n)) and all(r["score"] == 1.0 for r in got)
    name = sig.name
    assert f"ERROR: interrupted ({name}) after {n} of {len(rows)} rows; the {n} rows scored so far " \
           f"are in {kept} ({out} is unchanged)" in err
    assert "Traceback" not in err
    assert out.read_text() == "earlier results\n"


# ---- a reward's exit, interrupt or print -------------------------------------------------------

@pytest.mark.timeout(120)
@pytest.mark.parametrize("executor", ["inline", "thread", "process", "async", "inline-sigint-ignored"])
def test_reward_exit_fails_its_sample_only(cli, tmp_path, executor):
    """A reward's ``sys.exit`` or ``KeyboardInterrupt`` fails its sample only, also where the
    command runs with SIGINT ignored (started in the background by a shell, as CI jobs may be)."""
    text = EXIT_REWARD
    if executor == "async":
        text = text.replace("def compute_score", "async def compute_score")
    reward = _write(tmp_path / "r.py", text)
    ex = executor.split("-")[0] if executor != "async" else "inline"
    cfg = _write(tmp_path / "c.yaml", f"reward:\n  rewards:\n    - path: {reward}\n      executor: {ex}\n"
                                      "      on_failure: nan\n")
    data = _jsonl(tmp_path / "d.jsonl", [{"response": r} for r in ("a", "exit", "kbd", "b")])
    out = tmp_path / "o.jsonl"
    if executor.endswith("sigint-ignored"):
        res = subprocess.run([sys.executable, "-m", "rewardhub", "score", cfg, data, "-o", str(out)],
                             capture_output=True, text=True, timeout=90,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    else:
        res = cli("score", cfg, data, "-o", str(out), timeout=90)
    assert res.returncode == 0, res.stderr
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["response"] for r in rows] == ["a", "exit", "kbd", "b"]
    assert [r["score"] for r in rows][::3] == [1.0, 1.0]
    assert rows[1]["score"] != rows[1]["score"] and rows[2]["score"] != rows[2]["score"]  # NaN
    assert "SystemExit" in rows[1]["errors"]["compute_score"]
    assert "KeyboardInterrupt" in rows[2]["errors"]["compute_score"]
    assert "4 samples scored" in res.stdout


@pytest.mark.timeout(120)
@pytest.mark.parametrize("executor", ["inline", "process"])
def test_reward_print_never_reaches_the_jsonl_on_stdout(cli, tmp_path, executor):
    reward = _write(tmp_path / "r.py", EXIT_REWARD)
    cfg = _write(
        tmp_path / "c.yaml", f"reward:\n  rewards:\n    - path: {reward}\n      executor: {executor}\n"
    )
    data = _jsonl(tmp_path / "d.jsonl", [{"response": r} for r in ("a", "b", "c")])
    res = cli("score", cfg, data, timeout=90)
    assert res.returncode == 0, res.stderr
    rows = [json.loads(line) for line in res.stdout.splitlines()]  # every stdout line is a row
    assert [r["score"] for r in rows] == [1.0, 1.0, 1.0]
    assert res.stderr.count("printed by the reward") == 3
    assert res.stderr.count("written to fd 1 by the reward") == 3


def test_plugin_calling_sys_exit_at_import_is_a_broken_plugin(cli, tmp_path):
    (tmp_path / "exiting_plugin.py").write_text("import sys\nsys.exit(0)\n")
    env = {"PYTHONPATH": str(tmp_path), "REWARDHUB_PLUGINS": "exiting_plugin"}
    res = cli("list", "--json", env=env)
    assert res.returncode == 0, res.stderr
    names = {r["name"]: r for r in json.loads(res.stdout)}
    assert "exact_match" in names  # the others still load
    res = cli("list", "--plugins", "--json", env=env)
    assert res.returncode == 0
    broken = [p for p in json.loads(res.stdout) if p.get("name") == "exiting_plugin"]
    assert broken and "SystemExit" in json.dumps(broken[0])


# ---- input fields named like the results -------------------------------------------------------

def test_input_field_named_score_is_refused_with_its_name(cli, simple, tmp_path):
    cfg, _ = simple
    data = _jsonl(tmp_path / "prev.jsonl", [{"response": "a"}, {"response": "b", "extra": {"mine": 1}}])
    out = tmp_path / "o.jsonl"
    res = cli("score", cfg, data, "-o", str(out))
    assert res.returncode == 2
    assert (
        res.stderr.splitlines()[0]
        == f"ERROR: {data}: row 2 has a field 'extra', which score writes its results to"
    )
    assert "--namespace" in res.stderr and not out.exists() and _leftovers(tmp_path) == []


def test_namespace_keeps_the_users_fields(cli, simple, tmp_path):
    cfg, _ = simple
    data = _jsonl(
        tmp_path / "prev.jsonl", [{"response": "ab", "score": 7, "rewards": ["mine"], "extra": "e"}]
    )
    out = tmp_path / "o.jsonl"
    res = cli("score", cfg, data, "-o", str(out), "--namespace", "rh")
    assert res.returncode == 0, res.stderr
    (row,) = [json.loads(x) for x in out.read_text().splitlines()]
    assert (row["score"], row["rewards"], row["extra"]) == (7, ["mine"], "e")
    assert row["rh"]["score"] == 2.0 and row["rh"]["rewards"] == {"compute_score": 2.0}


def test_score_in_process_writes_rows_to_a_captured_stdout(simple, capsys):
    """Called as a function (stdout not a file descriptor): rows still reach stdout, prints stderr."""
    from rewardhub.cli import main

    cfg, data = simple
    assert main(["score", cfg, data]) == 0
    captured = capsys.readouterr()
    assert [json.loads(line)["score"] for line in captured.out.splitlines()] == [1.0, 2.0, 3.0]
    assert "3 samples scored" in captured.err
