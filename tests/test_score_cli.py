"""`rewardhub score` end to end: one row per input row in order, summary table, legacy keys, hangs."""

from __future__ import annotations

import json
import math
import os
import sys
import textwrap

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_score_example_data(cli, tmp_path):
    out = tmp_path / "out.jsonl"
    res = cli(
        "score",
        os.path.join(REPO, "examples/score.yaml"),
        os.path.join(REPO, "examples/math_samples.jsonl"),
        "-o",
        str(out),
    )
    assert res.returncode == 0, res.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    with open(os.path.join(REPO, "examples/math_samples.jsonl")) as f:
        inputs = [json.loads(line) for line in f]
    assert len(rows) == len(inputs) == 200
    assert [r["prompt"] for r in rows] == [r["prompt"] for r in inputs]
    for r in rows:
        style = r["extra_info"]["style"]
        assert r["rewards"]["math_verify"] == (0.0 if style in ("wrong", "none") else 1.0), r
        assert r["score"] == r["rewards"]["math_verify"] + 0.1 * r["rewards"]["boxed_format"]
    assert "math_verify" in res.stdout and "timeouts" in res.stdout and "200 samples scored" in res.stdout


def test_legacy_custom_reward_function_through_score(cli, tmp_path):
    reward = tmp_path / "my_reward.py"
    reward.write_text(textwrap.dedent("""
        def compute_score(data_source, solution_str, ground_truth, extra_info=None):
            return 1.0 if solution_str.strip().endswith(str(ground_truth)) else 0.0
    """))
    cfg = tmp_path / "legacy.yaml"
    cfg.write_text("custom_reward_function:\n  path: my_reward.py\ntrainer:\n  total_epochs: 1\n")
    data = tmp_path / "d.jsonl"
    data.write_text("\n".join(json.dumps({"prompt": "q", "response": r, "ground_truth": "42"})
                              for r in ["it is 42", "it is 41", "42"]) + "\n")
    out = tmp_path / "o.jsonl"
    res = cli("score", str(cfg), str(data), "-o", str(out), cwd=str(tmp_path.parent))
    assert res.returncode == 0, res.stderr
    assert [json.loads(x)["score"] for x in out.read_text().splitlines()] == [1.0, 0.0, 1.0]
    assert "legacy keys: 1 moved, 0 dropped (see `rewardhub migrate" in res.stderr  # the migration is told


def test_score_tells_a_launch_scripts_legacy_keys_in_checks_one_line(cli, tmp_path):
    """Not one raw Python warning (two lines, shim.py's source) per migrated key."""
    (tmp_path / "r.py").write_text("def compute_score(data_source, solution_str, ground_truth, **kw):\n"
                                   "    return float(solution_str == ground_truth)\n")
    (tmp_path / "run.sh").write_text(
        "python3 -m verl.trainer.main_ppo data.max_response_length=64 reward_model.reward_manager=dapo \\\n"
        "  +reward_model.reward_kwargs.overlong_buffer_cfg.enable=True \\\n"
        "  +reward_model.reward_kwargs.overlong_buffer_cfg.len=16 \\\n"
        "  +reward_model.reward_kwargs.max_resp_len=64 \\\n"
        "  +reward_model.reward_kwargs.overlong_buffer_cfg.log=False \\\n"
        "  custom_reward_function.path=r.py custom_reward_function.name=compute_score\n")
    (tmp_path / "d.jsonl").write_text('{"response": "4", "ground_truth": "4"}\n')
    line = "legacy keys: 7 moved, 1 dropped (see `rewardhub migrate run.sh`)"
    check = cli("check", "run.sh", cwd=tmp_path)
    assert check.returncode == 0 and check.stdout.splitlines()[0] == line, check.stdout + check.stderr
    res = cli("score", "run.sh", "d.jsonl", "-o", "o.jsonl", "--no-progress", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stderr.splitlines()[0] == line and "Warning" not in res.stderr, res.stderr
    assert json.loads((tmp_path / "o.jsonl").read_text())["rewards"] == {"compute_score": 1.0,
                                                                          "overlong_penalty": 0.0}



def test_summary_json_names_every_used_reward_and_where_it_ran(cli, tmp_path):
    """Provenance: each term's source, distribution and version, target, sha256 of a file reward,
    its executor and the processes that ran it."""
    import hashlib

    reward = tmp_path / "my_reward.py"
    reward.write_text(
        "import os\n\ndef compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    return {'score': float(solution_str == ground_truth), 'pid': os.getpid()}\n"
    )
    cfg = tmp_path / "c.yaml"
    cfg.write_text("reward:\n  rewards:\n    - name: math_verify\n      executor: process\n"
                   "    - path: my_reward.py\n      function: compute_score\n")
    data = tmp_path / "d.jsonl"
    data.write_text("\n".join(json.dumps({"response": r, "ground_truth": "42"}) for r in ["42", "41"]) + "\n")
    summary = tmp_path / "s.json"
    res = cli("score", str(cfg), str(data), "-o", str(tmp_path / "o.jsonl"), "--summary-json", str(summary))
    assert res.returncode == 0, res.stderr
    used = {r["name"]: r for r in json.loads(summary.read_text())["rewards"]}
    assert set(used) == {"math_verify", "compute_score"}
    mv, mine = used["math_verify"], used["compute_score"]
    assert (mv["source"], mv["dist"], mv["target"], mv["executor"]) == (
        "entry-point", "rewardhub-math", "rewardhub_math.reward:math_verify", "process")
    assert mv["version"] and mv["sha256"] is None and mv["workers"] and all(w["pid"] for w in mv["workers"])
    assert mine["sha256"] == hashlib.sha256(reward.read_bytes()).hexdigest() and mine["executor"] == "inline"
    ran_in = {
        json.loads(x)["extra"]["compute_score"]["pid"]
        for x in (tmp_path / "o.jsonl").read_text().splitlines()
    }
    assert [w["pid"] for w in mine["workers"]] == sorted(ran_in)  # the process that really ran it

def test_hang_is_timed_out_and_counted(cli, tmp_path):
    reward = tmp_path / "hang.py"
    reward.write_text("import time\ndef compute_score(*, response, **kw):\n"
                      "    if response == 'hang':\n        time.sleep(3600)\n    return 1.0\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        f"reward:\n  rewards:\n    - path: {reward}\n      timeout_s: 2\n      executor: process\n"
    )
    data = tmp_path / "d.jsonl"
    data.write_text("\n".join(json.dumps({"response": r}) for r in ["a", "hang", "b"]) + "\n")
    out = tmp_path / "o.jsonl"
    res = cli("score", str(cfg), str(data), "-o", str(out), timeout=60)
    assert res.returncode == 0, res.stderr
    scores = [json.loads(x)["score"] for x in out.read_text().splitlines()]
    assert scores[::2] == [1.0, 1.0] and math.isnan(scores[1])  # a failure is never a score (on_failure: nan)
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("compute_score"))
    assert line.split()[5] == "1"  # the timeouts column


def test_bad_inputs(cli, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("reward:\n  rewards:\n    - name: math_verfy\n")
    data = tmp_path / "d.jsonl"
    data.write_text('{"response": "x"}\nnot json\n')
    res = cli("score", str(cfg), str(data))
    assert res.returncode in (1, 2) and "Traceback" not in res.stderr
    assert "math_verfy" in res.stderr or "not valid JSON" in res.stderr
    cfg.write_text("reward:\n  rewards:\n    - name: math_verfy\n")
    data.write_text('{"response": "x"}\n')
    res = cli("score", str(cfg), str(data))
    assert res.returncode == 1 and "did you mean: 'math_verify'" in res.stderr
    cfg.write_text("reward:\n  rewards:\n    - name: math_verify\n")
    data.write_text('{"response": "x"}\nnot json\n')
    res = cli("score", str(cfg), str(data))
    assert res.returncode == 2 and f"{data}, row 2: not valid JSON" in res.stderr


def test_progress_bar_on_a_terminal_and_errors_in_the_table(tmp_path):
    import pty
    import subprocess

    reward = tmp_path / "r.py"
    reward.write_text("def compute_score(*, response, **kw):\n"
                      "    if response == 'bad':\n        raise ValueError('no')\n    return 1.0\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"reward:\n  rewards:\n    - path: {reward}\n")
    data = tmp_path / "d.jsonl"
    data.write_text("\n".join(json.dumps({"response": r}) for r in ["a", "bad", "b", "bad"]) + "\n")
    out = tmp_path / "o.jsonl"
    leader, follower = pty.openpty()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "rewardhub", "score", str(cfg), str(data), "-o", str(out)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=follower,
            timeout=120,
        )
        os.close(follower)
        follower = -1
        chunks = []
        while True:
            try:
                got = os.read(leader, 65536)
            except OSError:
                break
            if not got:
                break
            chunks.append(got)
    finally:
        os.close(leader)
        if follower != -1:
            os.close(follower)
    tty = b"".join(chunks).decode()
    assert proc.returncode == 0
    assert "\rscoring [" in tty and "4/4" in tty
    table = proc.stdout.decode()
    line = next(ln for ln in table.splitlines() if ln.startswith("compute_score"))
    assert line.split()[4:6] == ["2", "0"]  # errors, timeouts
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["score"] for r in rows][::2] == [1.0, 1.0] and all(math.isnan(r["score"]) for r in rows[1::2])
    assert "ValueError: no" in rows[1]["errors"]["compute_score"]
    # no terminal: no bar
    res = subprocess.run([sys.executable, "-m", "rewardhub", "score", str(cfg), str(data), "-o", str(out)],
                         capture_output=True, text=True, timeout=120)
    assert "scoring [" not in res.stderr


def test_a_local_score_loads_neither_omegaconf_nor_the_ray_side(tmp_path):
    """What a plain local ``score`` does not need stays unimported: OmegaConf (no ``${...}`` in the
    reward section) and :mod:`rewardhub.distributed` (no term runs on Ray): ~55 ms of its start-up."""
    import subprocess

    cfg = tmp_path / "c.yaml"
    cfg.write_text("reward:\n  rewards:\n    - name: exact_match\n      executor: process\n")
    data = tmp_path / "d.jsonl"
    data.write_text('{"response": "4", "ground_truth": "4"}\n{"response": "5", "ground_truth": "4"}\n')
    code = (
        "import sys\nfrom rewardhub.cli import main\n"
        f"sys.argv = ['rewardhub', 'score', {str(cfg)!r}, {str(data)!r}, '-o', "
        f"{str(tmp_path / 'o.jsonl')!r}]\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "print(sorted(m for m in sys.modules if m == 'omegaconf' or m.startswith('rewardhub.distributed')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"
    rows = [json.loads(line) for line in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert [r["rewards"]["exact_match"] for r in rows] == [1.0, 0.0]
