"""The reward cache (issue 36 §4): one call per distinct input in a batch, none for an input scored before
(across `rewardhub score` runs with --cache DIR), never an old entry for a changed reward, failures not
stored, hits and misses in the metrics. Real calls are counted: the reward appends each input to a file."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from rewardhub.errors import UsageError
from rewardhub.execution import Outcome
from rewardhub.execution import Runner
from rewardhub.execution import aggregate
from rewardhub.execution import apply_on_failure_to_outcomes

COUNTED = textwrap.dedent('''
    def counted(*, response, ground_truth, log):
        with open(log, "a") as f:
            f.write(response + "\\n")
        if response == "boom":
            raise ValueError("boom")
        return {"score": float(len(response)), "chars": len(response)}

    def counted_many(*, responses, log):
        with open(log, "a") as f:
            f.write("".join(r + "\\n" for r in responses))
        return [float(len(r)) for r in responses]

    def ranked(*, responses, log):
        return [0.0 for _ in responses]
''')

#: a GRPO group of 8 completions of one prompt, 3 of them distinct
GROUP = ["4", "the answer is 4", "4", "5", "the answer is 4", "4", "4", "5"]


def _calls(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def _samples(replies: list[str]) -> list[dict[str, object]]:
    return [{"prompt": "2+2?", "response": r, "ground_truth": "4", "data_source": "math",
             "extra_info": {"uid": "q1"}} for r in replies]


def _term(tmp_path: Path, log: Path, **extra: object) -> dict[str, object]:
    path = tmp_path / "counted.py"
    if not path.exists():
        path.write_text(COUNTED)
    return {"path": str(path), "function": "counted", "kwargs": {"log": str(log)}, **extra}


@pytest.mark.parametrize("executor", ["inline", "thread", "process"])
def test_a_group_of_identical_completions_costs_one_call_each(tmp_path, executor):
    log = tmp_path / "calls.txt"
    with Runner.from_config({"rewards": [_term(tmp_path, log, cache=True, executor=executor)]}) as runner:
        res = runner.score(_samples(GROUP))
        assert sorted(_calls(log)) == ["4", "5", "the answer is 4"]  # 3 calls for 8 samples
        assert res.scores == [float(len(r)) for r in GROUP]
        assert [e["counted"] for e in res.extra] == [{"chars": len(r)} for r in GROUP]
        m = res.metrics
        assert (m["rewards/counted/cache_hits"], m["rewards/counted/cache_misses"]) == (5.0, 3.0)
        again = runner.score(_samples(GROUP + ["6 is not it"]))  # the next step: only the new reply is called
    assert sorted(_calls(log)) == ["4", "5", "6 is not it", "the answer is 4"]
    assert again.scores == [float(len(r)) for r in GROUP + ["6 is not it"]]
    m = again.metrics
    assert (m["rewards/counted/cache_hits"], m["rewards/counted/cache_misses"]) == (8, 1)


def test_without_cache_every_sample_is_called_and_no_cache_metrics(tmp_path):
    log = tmp_path / "calls.txt"
    with Runner.from_config({"rewards": [_term(tmp_path, log)]}) as runner:
        res = runner.score(_samples(GROUP))
    assert len(_calls(log)) == 8
    assert not [k for k in res.metrics if "cache" in k]


def test_a_batched_reward_is_called_with_the_distinct_inputs_only(tmp_path):
    log = tmp_path / "calls.txt"
    term = {**_term(tmp_path, log, cache=True), "function": "counted_many", "kind": "batched"}
    with Runner.from_config({"rewards": [term]}) as runner:
        res = runner.score(_samples(GROUP))
    assert sorted(_calls(log)) == ["4", "5", "the answer is 4"]
    assert res.scores == [float(len(r)) for r in GROUP]


def test_failures_are_not_stored(tmp_path):
    log = tmp_path / "calls.txt"
    with Runner.from_config({"rewards": [_term(tmp_path, log, cache=True, on_failure="zero")]}) as runner:
        first = runner.score(_samples(["boom", "4", "boom"]))
        assert _calls(log) == ["boom", "4"]  # the same input in one batch shares its one call, failed or not
        assert first.scores == [0.0, 1.0, 0.0]
        assert first.metrics["rewards/counted/errors"] == 2.0
        assert "sample 2 has the same input" in first.errors[2]["counted"]
        second = runner.score(_samples(["boom", "4"]))
    assert _calls(log) == ["boom", "4", "boom"]  # the failure was called again, the score was not
    assert second.scores == [0.0, 1.0]
    m = second.metrics
    assert (m["rewards/counted/cache_hits"], m["rewards/counted/cache_misses"]) == (1, 1)


def test_the_key_holds_the_kwargs_and_the_fields_the_reward_reads(tmp_path):
    log = tmp_path / "calls.txt"
    other = tmp_path / "other.txt"
    with Runner.from_config({"rewards": [_term(tmp_path, log, cache=True)]}) as runner:
        # prompt and extra_info are not read by the reward: other values still hit
        runner.score([{**s, "prompt": f"p{i}", "extra_info": {"i": i}}
                      for i, s in enumerate(_samples(["4"] * 3))])
        assert _calls(log) == ["4"]
        runner.score([{**_samples(["4"])[0], "ground_truth": "5"}])  # a field it reads: another input
        assert _calls(log) == ["4", "4"]
    with Runner.from_config({"rewards": [_term(tmp_path, other, cache=True)]}) as runner:
        runner.score(_samples(["4"]))
    assert _calls(other) == ["4"]  # other kwargs: another key


def test_parquet_values_are_keyed_and_a_value_json_cannot_hold_is_called_every_time(tmp_path):
    np = pytest.importorskip("numpy")
    log = tmp_path / "calls.txt"
    with Runner.from_config({"rewards": [_term(tmp_path, log, cache=True)]}) as runner:
        arrays = [{**s, "ground_truth": np.array(["4", "four"], dtype=object)} for s in _samples(["4", "4"])]
        odd = [{**s, "ground_truth": object()} for s in _samples(["4", "4"])]
        assert runner.score(arrays).scores == runner.score(odd).scores == [1.0, 1.0]
    assert _calls(log) == ["4", "4", "4"]  # the arrays: one call; the objects: one each


def test_a_group_reward_with_cache_on_is_refused(tmp_path):
    term = {**_term(tmp_path, tmp_path / "calls.txt", cache=True), "function": "ranked", "kind": "group"}
    with pytest.raises(UsageError, match="'ranked' has cache on, but it is a group reward"):
        Runner.from_config({"rewards": [term]})


def test_hits_travel_from_a_reward_worker_into_the_pools_metrics(tmp_path):
    """What a Ray reward worker sends (outcomes in wire form) keeps its hits: the trainer's per-reward
    metrics (RewardWorkerPool.score: from_wire, on_failure, aggregate) say them."""
    log = tmp_path / "calls.txt"
    with Runner.from_config({"rewards": [_term(tmp_path, log, cache=True)]}) as runner:
        wire = [o.to_wire() for o in runner.score(_samples(GROUP)).outcomes["counted"]]
    outs = [Outcome.from_wire(w) for w in wire]
    apply_on_failure_to_outcomes("counted", "nan", outs)
    res = aggregate([("counted", 1.0)], "weighted_sum", {"counted": outs}, len(outs))
    assert (res.metrics["rewards/counted/cache_hits"], res.metrics["rewards/counted/cache_misses"]) == (5, 3)
    assert res.metrics["rewards/counted/count"] == 8.0


# ---- across `rewardhub score` runs: --cache DIR ----------------------------------------------------

def _score_run(cli, tmp_path: Path, cfg: Path, tag: str, env: dict[str, str] | None = None
               ) -> tuple[list[dict[str, object]], dict[str, float]]:
    out, summary = tmp_path / f"out-{tag}.jsonl", tmp_path / f"summary-{tag}.json"
    res = cli("score", str(cfg), str(tmp_path / "data.jsonl"), "-o", str(out), "--summary-json",
              str(summary), "--cache", str(tmp_path / "cache"), env=env)
    assert res.returncode == 0, res.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    return rows, json.loads(summary.read_text())["metrics"]


def test_score_rerun_with_a_cache_folder_costs_no_call_and_gives_the_same_rows(cli, tmp_path):
    log = tmp_path / "calls.txt"
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(s) + "\n" for s in _samples(GROUP)))
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(json.dumps({"reward": {"rewards": [_term(tmp_path, log, cache=True)]}}))
    rows, metrics = _score_run(cli, tmp_path, cfg, "1")
    assert len(_calls(log)) == 3
    assert (metrics["rewards/counted/cache_hits"], metrics["rewards/counted/cache_misses"]) == (5, 3)
    again, metrics = _score_run(cli, tmp_path, cfg, "2")
    assert len(_calls(log)) == 3  # no call at all
    assert again == rows
    assert (metrics["rewards/counted/cache_hits"], metrics["rewards/counted/cache_misses"]) == (8, 0)
    # the reward's file changed: its sha256 is another key, no old entry is hit
    (tmp_path / "counted.py").write_text(COUNTED.replace("float(len(response))", "float(len(response)) + 1"))
    changed, _ = _score_run(cli, tmp_path, cfg, "3")
    assert len(_calls(log)) == 6
    assert [r["score"] for r in changed] == [len(r) + 1.0 for r in GROUP]


def test_another_version_of_an_installed_reward_never_hits_an_old_entry(cli, tmp_path):
    from rewardhub.testing import write_distribution

    log = tmp_path / "calls.txt"
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(s) + "\n" for s in _samples(GROUP)))
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(json.dumps({"reward": {"rewards": [
        {"name": "counted", "cache": True, "kwargs": {"log": str(log)}}]}}))
    for version, calls in (("1.0", 3), ("1.0", 3), ("2.0", 6)):
        site = tmp_path / f"site-{version}"
        write_distribution(site, "counted-rewards", version,
                           entry_points={"rewardhub.rewards": {"counted": "counted_mod:counted"}},
                           modules={"counted_mod": COUNTED})
        env = {"PYTHONPATH": f"{site}:{os.environ.get('PYTHONPATH', '')}", "REWARDHUB_NO_CACHE": "1"}
        rows, _ = _score_run(cli, tmp_path, cfg, version, env=env)
        assert len(_calls(log)) == calls, version
        assert [r["score"] for r in rows] == [float(len(r)) for r in GROUP]


def test_score_warns_when_no_term_caches(cli, tmp_path):
    (tmp_path / "data.jsonl").write_text(json.dumps(_samples(["4"])[0]) + "\n")
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(json.dumps({"reward": {"rewards": [_term(tmp_path, tmp_path / "calls.txt")]}}))
    res = cli("score", str(cfg), str(tmp_path / "data.jsonl"), "--cache", str(tmp_path / "cache"))
    assert res.returncode == 0, res.stderr
    assert "no reward term has cache on (set cache: true on a term)" in res.stderr


def test_the_expensive_first_party_rewards_cache_by_default():
    from rewardhub.registry import build_registry

    registry = build_registry()
    for name in ("code_tests", "code_io", "judge", "reward_model"):
        assert registry.load_full(registry.get_reward(name))[0].policy.cache, name
