"""A routed reward that applies to no row says so (score, TRL, verl, the trainer's client), the config can
turn its routing off, and ``rewardhub test`` fails a reward it never called."""

from __future__ import annotations

import json
import textwrap

from rewardhub.adapters import to_trl
from rewardhub.adapters import to_verl
from rewardhub.execution import Runner
from rewardhub.execution import aggregate
from rewardhub.verl.managers import VerlBatchScorer

ROUTED = textwrap.dedent('''
    import rewardhub

    @rewardhub.reward(data_sources=("gsm8k",))
    def only_gsm8k(*, response, ground_truth, **kw):
        return float(response.strip() == ground_truth)
''')

ROWS = [{"response": "42", "ground_truth": "42"}, {"response": "41", "ground_truth": "42"}]


def _setup(tmp_path, routing=""):
    (tmp_path / "routed.py").write_text(ROUTED)
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    (tmp_path / "c.yaml").write_text(
        f"reward:\n  rewards:\n    - path: routed.py\n      function: only_gsm8k\n{routing}")
    return str(tmp_path / "c.yaml"), str(tmp_path / "rows.jsonl")


def test_score_warns_when_a_reward_applied_to_no_row(cli, tmp_path):
    cfg, rows = _setup(tmp_path)
    res = cli("score", cfg, rows)
    assert res.returncode == 0, res.stderr
    assert [json.loads(line)["score"] for line in res.stdout.splitlines()] == [None, None]
    warnings = [line for line in res.stderr.splitlines() if line.startswith("WARNING:")]
    assert warnings == [
        "WARNING: reward 'only_gsm8k' applied to 0 of 2 rows: it is routed to data_source in ['gsm8k'], and "
        "no row matched, so it scored none of them (null); give rows a matching data_source, or turn its "
        "routing off with data_sources: [] in its config term"
    ]


def test_an_empty_data_sources_in_the_config_turns_routing_off(cli, tmp_path):
    cfg, rows = _setup(tmp_path, "      data_sources: []\n")
    res = cli("score", cfg, rows)
    assert res.returncode == 0, res.stderr
    assert [json.loads(line)["score"] for line in res.stdout.splitlines()] == [1.0, 0.0]
    assert "WARNING" not in res.stderr
    # a list of its own replaces the reward's routes
    cfg, rows = _setup(tmp_path, "      data_sources: [other]\n")
    res = cli("score", cfg, rows)
    assert "routed to data_source in ['other']" in res.stderr


def test_trl_and_verl_callables_warn_once_per_term(tmp_path, monkeypatch, capfd):
    (tmp_path / "routed.py").write_text(ROUTED)
    term = {"path": str(tmp_path / "routed.py"), "function": "only_gsm8k"}
    trl = to_trl(term)
    for _ in range(3):  # three TRL steps: one warning
        assert trl(prompts=["q", "q"], completions=["42", "41"], ground_truth=["42", "42"]) == [None, None]
    err = capfd.readouterr().err
    assert err.count("WARNING: reward 'only_gsm8k' applied to 0 of 2 rows so far: it is routed to "
                     "data_source in ['gsm8k']") == 1
    # rows of its data source: scored, and no warning
    trl = to_trl(term)
    assert trl(prompts=["q"], completions=["42"], ground_truth=["42"], data_source=["gsm8k"]) == [1.0]
    assert "WARNING" not in capfd.readouterr().err
    verl = to_verl(term)
    for _ in range(3):
        assert verl("openai/gsm8k", "42", "42")["score"] == 0.0
    err = capfd.readouterr().err
    assert err.count("WARNING: reward 'only_gsm8k' applied to 0 of 1 rows so far") == 1


def test_verl_batch_scorer_warns_once(tmp_path, capfd):
    (tmp_path / "routed.py").write_text(ROUTED)
    scorer = VerlBatchScorer({"reward": {"rewards": [
        {"path": str(tmp_path / "routed.py"), "function": "only_gsm8k"}]}})
    try:
        rows = [{**r, "data_source": "math"} for r in ROWS]
        for _ in range(2):
            scores, _ = scorer.score(rows)
            assert scores == [0.0, 0.0]
    finally:
        scorer.runner.close()
    assert capfd.readouterr().err.count("WARNING: reward 'only_gsm8k' applied to 0 of 2 rows so far") == 1


def test_config_routes_name_a_registered_rewards_routes_from_outcomes(tmp_path):
    """Outcomes pooled from reward workers (what the trainer's driver counts) and the config only: the
    routes are resolved from the registry when a warning is due."""
    from rewardhub.execution import RoutingWatch
    from rewardhub.execution import config_routes

    section = {"rewards": [{"name": "exact_match", "alias": "em", "data_sources": ["gsm8k"]},
                           {"name": "exact_match"}]}
    said: list[str] = []
    watch = RoutingWatch(config_routes(section), said.append)
    with Runner.from_config(section) as runner:
        res = runner.score([{**r, "data_source": "math"} for r in ROWS])
    outcomes = res.outcomes  # what reward workers send back
    pooled = aggregate([("em", 1.0), ("exact_match", 1.0)], "weighted_sum", outcomes, 2)
    watch.see(pooled.columns)
    watch.see(pooled.columns)
    assert said == ["reward 'em' applied to 0 of 2 rows so far: it is routed to data_source in ['gsm8k'], "
                    "and no row matched, so it scored none of them (null); give rows a matching "
                    "data_source, or turn its routing off with data_sources: [] in its config term"]


def test_rewardhub_test_fails_a_reward_it_never_called(cli, tmp_path):
    cfg, rows = _setup(tmp_path)
    res = cli("test", cfg, "--executors", "inline", "--json")
    assert res.returncode == 1, res.stderr
    check = next(c for c in json.loads(res.stdout) if c["contract"] == "applies to a row")
    assert check["status"] == "FAIL"
    assert check["detail"].startswith("never called: it is routed to data_source in ['gsm8k'], and none "
                                      "of the 3 rows matched")
    cfg, rows = _setup(tmp_path, "      data_sources: []\n")
    res = cli("test", cfg, rows, "--executors", "inline", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
