"""The judging modes against a stub chat-completions server on 127.0.0.1 (tests/judge_stub.py): pairwise
with position swap, tournaments, rubrics, self-consistency, scores from logprobs, failures and their
counts, the calibration report and its gate (through the Runner and `rewardhub` in a subprocess)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
from judge_stub import StubJudge
from judge_stub import pair_judge
from judge_stub import rubric_judge
from judge_stub import score_judge

from rewardhub.execution import Runner

QUALITIES = [1, 5, 9, 3, 7, 2, 8, 4]  # clear: no two closer than 1


@pytest.fixture(scope="module")
def stub():
    server = StubJudge()
    yield server
    server.close()


def group(qualities, uid="g", tag=""):
    return [{"prompt": f"p{tag}", "response": f"q={q}{tag}", "ground_truth": "q=5",
             "extra_info": {"uid": uid}} for q in qualities]


def judged(stub, name, rows, term=None, **kwargs):
    kw = {"base_url": stub.url, "model": "m", "backoff_s": 0.01, **kwargs}
    with Runner.from_config({"rewards": [{"name": name, "kwargs": kw, **(term or {})}]}) as runner:
        return runner.score(rows)


@pytest.mark.timeout(120)
def test_tournament_calls_exactly_the_pattern_and_orders_the_group(stub):
    stub.reset(pair_judge(near=0.5))
    res = judged(stub, "llm_judge_pairwise", group(QUALITIES), mode="tournament")
    assert len(stub.requests) == 56  # 8 * 7: every pair both ways
    assert res.errors == [{}] * 8 or not any(res.errors)
    order = sorted(range(8), key=lambda i: res.scores[i])
    assert order == sorted(range(8), key=lambda i: QUALITIES[i])  # the true order
    assert res.scores[QUALITIES.index(9)] == 1.0 and res.scores[QUALITIES.index(1)] == 0.0
    assert res.metrics["rewards/llm_judge_pairwise/judge_calls"] == 56.0
    # asked again: every pair is cached, no call
    res = judged(stub, "llm_judge_pairwise", group(QUALITIES), mode="tournament")
    assert len(stub.requests) == 56 and res.metrics["rewards/llm_judge_pairwise/judge_calls"] == 0.0
    stub.reset(pair_judge(near=0.5))
    res = judged(stub, "llm_judge_pairwise", group(QUALITIES, tag="b"), mode="tournament",
                 pattern="all_pairs_one_way")
    assert len(stub.requests) == 28
    firsts = [r["body"]["messages"][1]["content"].split("ANSWER B:")[0] for r in stub.requests]
    assert all(sum(f"q={q}b" in f for f in firsts) in (3, 4) for q in QUALITIES)  # no response always first
    stub.reset(pair_judge(near=0.5))
    res = judged(stub, "llm_judge_pairwise", group(QUALITIES, tag="c"), mode="tournament",
                 pattern="vs_reference")
    assert len(stub.requests) == 16  # both orders against the reference (q=5)


@pytest.mark.timeout(120)
def test_swap_turns_a_position_bias_into_ties_never_wins(stub):
    """A judge that always picks the first answer on near-ties: without swap each response wins
    whenever it is shown first; with swap the two orders disagree, so the pair is a tie (0.5)."""
    stub.reset(pair_judge(p_first=1.0, near=2.0))
    near = [{"prompt": "near", "response": f"q={q}", "ground_truth": "q=5", "extra_info": {"uid": f"u{q}"}}
            for q in (4, 5, 6)]
    res = judged(stub, "llm_judge_pairwise", near, swap=False)
    assert res.scores == [1.0, 1.0, 1.0] and len(stub.requests) == 3  # the response was always first
    stub.reset(pair_judge(p_first=1.0, near=2.0))
    res = judged(stub, "llm_judge_pairwise", near, swap=True)
    # the response-first orders were asked above (cached); q=5 against the reference q=5 is one text pair
    assert res.scores == [0.5, 0.5, 0.5] and len(stub.requests) == 2
    assert res.metrics["rewards/llm_judge_pairwise/judge_swap_flips"] == 1.0
    stub.reset(pair_judge(p_first=1.0, near=2.0))  # clear cases stay wins and losses
    clear = [{"prompt": "clear", "response": f"q={q}", "ground_truth": "q=5", "extra_info": {"uid": f"v{q}"}}
             for q in (0, 9)]
    assert judged(stub, "llm_judge_pairwise", clear, swap=True).scores == [0.0, 1.0]


@pytest.mark.timeout(120)
def test_a_failed_call_fails_its_pair_with_its_kind_never_a_loss(stub):
    """Calls on pairs holding q=3 fail (HTTP 503, no retries); those responses fail with the kind, the
    others keep their scores, and every failed call is counted."""
    base = pair_judge(near=0.5)

    def flaky(body, n):
        return (503, "overloaded") if "q=3f" in body["messages"][1]["content"] else base(body, n)

    stub.reset(flaky)
    res = judged(stub, "llm_judge_pairwise", group(QUALITIES, tag="f"), mode="tournament", retries=0)
    bad = QUALITIES.index(3)
    errors = [e.get("llm_judge_pairwise", "") for e in res.errors]
    assert "judge call failed (unreachable)" in errors[bad] and "HTTP 503" in errors[bad]
    assert math.isnan(res.rewards[bad]["llm_judge_pairwise"])
    # a response whose pair with q=3 failed is failed too: no lost game counts as a loss
    assert sum(bool(e) for e in errors) == 8 and all("(pair" in e for e in errors)
    assert res.metrics["rewards/llm_judge_pairwise/judge_failed"] == 14.0  # q=3 against 7 others, both ways
    assert res.metrics["rewards/llm_judge_pairwise/judge_calls"] == 56.0
    # a reply with no verdict is a failure of kind no_verdict; a refusal is told apart
    stub.reset(lambda body, n: (200, "I cannot judge this." if n % 2 else "Hmm, both are fine"))
    res = judged(stub, "llm_judge_pairwise", group([1, 2], uid="r", tag="r"), swap=False,
                 term={"max_concurrency": 1})
    kinds = sorted(e["llm_judge_pairwise"].split(")")[0] for e in res.errors)
    assert kinds == ["judge call failed (no_verdict", "judge call failed (refusal"]


def test_max_calls_per_group_fails_the_group_before_any_call(stub):
    stub.reset(pair_judge())
    res = judged(stub, "llm_judge_pairwise", group(QUALITIES, tag="m"), mode="tournament",
                 max_calls_per_group=50)
    assert len(stub.requests) == 0
    assert all("needs 56 judge calls" in e["llm_judge_pairwise"] for e in res.errors)


CRITERIA = [{"text": f"mentions '{w}'", "weight": k + 1, "name": w}
            for k, w in enumerate("alpha beta gamma delta eps zeta eta theta iota kappa lam mu".split())]


@pytest.mark.timeout(180)
def test_rubric_through_score_cli(stub, tmp_path):
    """12 criteria at max_criteria 4: 3 calls a sample, in parallel, never more in flight than
    max_in_flight; each criterion's verdict and reason in the row, its pass rate in the summary."""
    stub.reset(rubric_judge, service_s=0.05)
    cfg = tmp_path / "rubric.yaml"
    cfg.write_text(json.dumps({"reward": {"rewards": [{"name": "llm_judge_rubric", "kwargs": {
        "base_url": stub.url, "model": "m", "criteria": CRITERIA, "max_criteria": 4, "max_in_flight": 2}}]}}))
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"prompt": "p", "response": r}) + "\n"
                            for r in ("alpha gamma mu", "beta", "nothing here", "alpha beta gamma delta")))
    out, summary = tmp_path / "out.jsonl", tmp_path / "s.json"
    proc = subprocess.run([sys.executable, "-m", "rewardhub", "score", str(cfg), str(data), "-o", str(out),
                           "--summary-json", str(summary)], capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stderr
    assert len(stub.requests) == 12 and stub.peak == 2
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows[0]["rewards"]["llm_judge_rubric"] == pytest.approx((1 + 3 + 12) / 78)
    assert rows[0]["extra"]["llm_judge_rubric"]["criteria"][11] == {
        "met": 1.0, "name": "mu", "reason": "looked for mu", "weight": 12.0}
    metrics = json.loads(summary.read_text())["metrics"]
    assert metrics["rewards/llm_judge_rubric/judge_calls"] == 12.0
    assert metrics["rewards/llm_judge_rubric/criterion/alpha"] == 0.5
    assert metrics["rewards/llm_judge_rubric/judge_failed"] == 0.0


def test_rubric_reply_missing_a_criterion_fails_the_sample(stub):
    stub.reset(lambda body, n: (200, "Criterion 1: YES - fine"))
    res = judged(stub, "llm_judge_rubric", [{"prompt": "p", "response": "alpha"}], criteria=CRITERIA[:2])
    assert math.isnan(res.scores[0])
    assert "judge call failed (no_verdict)" in res.errors[0]["llm_judge_rubric"]
    assert res.metrics["rewards/llm_judge_rubric/judge_failed"] == 1.0
    assert res.metrics["rewards/llm_judge_rubric/judge_calls"] == 1.0


def test_self_consistency_and_logprobs(stub):
    replies = ["Score: 2", "Score: 9", "Score: 9", "Score: 4", "Score: 9"]
    for aggregate, want in (("mean", 6.6), ("median", 9.0), ("majority", 9.0)):
        stub.reset(lambda body, n: (200, replies[n]))
        res = judged(stub, "llm_judge_sampled", [{"prompt": "p", "response": f"r {aggregate}"}], samples=5,
                     aggregate=aggregate, term={"max_concurrency": 1}, max_in_flight=1)
        assert res.scores[0] == pytest.approx(want) and len(stub.requests) == 5
    stub.reset(score_judge())
    rows = [{"prompt": "p", "response": "q=8"}, {"prompt": "p", "response": "q=1"}]
    res = judged(stub, "llm_judge_sampled", rows, score_from="logprobs")
    p10, p5, _ = (math.exp(-0.1), math.exp(-2.5), 0)
    assert res.scores[0] == pytest.approx((10 * p10 + 5 * p5) / (p10 + p5))
    assert res.scores[1] == pytest.approx(5 * p5 / (p10 + p5))
    assert stub.requests[0]["body"]["logprobs"] is True and stub.requests[0]["body"]["top_logprobs"] == 20
    stub.reset(lambda body, n: (200, "Score: 7"))  # an endpoint that gives no logprobs: a failure, not a 0
    res = judged(stub, "llm_judge_sampled", [{"prompt": "p", "response": "z"}], score_from="logprobs")
    assert "judge call failed (no_logprobs)" in res.errors[0]["llm_judge_sampled"]


def write_gold(path, n=200):
    import random

    rng = random.Random(3)
    with open(path, "w") as f:
        for _ in range(n):
            q = rng.randint(0, 9)
            f.write(json.dumps({"prompt": "p", "response": f"q={q} " + "x" * rng.randint(0, 40),
                                "label": "pass" if q >= 5 else "fail"}) + "\n")


@pytest.mark.timeout(300)
def test_calibration_report_and_gate(stub, tmp_path):
    gold = tmp_path / "gold.jsonl"
    write_gold(gold)
    cfg = tmp_path / "judge.yaml"
    cfg.write_text(json.dumps({"reward": {"rewards": [{"name": "llm_judge_sampled", "kwargs": {
        "base_url": stub.url, "model": "m"}, "calibration": {"gold": str(gold), "min_kappa": 0.6}}]}}))
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"prompt": "p", "response": "q=7 scored"}) + "\n")
    def run(*a):
        return subprocess.run([sys.executable, "-m", "rewardhub", *map(str, a)], capture_output=True,
                              text=True, timeout=200, env={**os.environ})

    stub.reset(score_judge(guess=True))
    proc = run("judge", "calibrate", cfg, gold, "--json")
    fig = json.loads(proc.stdout)[0]
    assert proc.returncode == 0 and fig["rows"] == 200 and fig["kappa"] < 0.2 and fig["judge_calls"] > 100
    for cmd in (("score", cfg, data, "-o", tmp_path / "o.jsonl"), ("check", cfg)):
        proc = run(*cmd)
        assert proc.returncode != 0
        line = [x for x in proc.stderr.splitlines() if "calibration" in x]
        assert len(line) == 1 and "reward term 'llm_judge_sampled' fails its calibration: kappa" in line[0]
        assert "< min_kappa 0.6 on 200 of 200 rows" in line[0]
    assert not (tmp_path / "o.jsonl").exists()
    stub.reset(score_judge())
    proc = run("score", cfg, data, "-o", tmp_path / "o.jsonl", "--summary-json", tmp_path / "s.json")
    assert proc.returncode == 0, proc.stderr
    cal = json.loads((tmp_path / "s.json").read_text())["calibration"]
    assert cal[0]["term"] == "llm_judge_sampled" and cal[0]["kappa"] == 1.0 and cal[0]["agreement"] == 1.0


def test_statistics():
    from rewardhub.builtin.judging.stats import cohen_kappa
    from rewardhub.builtin.judging.stats import kendall_tau
    from rewardhub.builtin.judging.stats import spearman_rho
    from rewardhub.builtin.judging.vote import vote

    assert cohen_kappa([1, 1, 0, 0], [1, 1, 0, 0]) == 1.0
    assert cohen_kappa([1, 0, 1, 0], [1, 1, 0, 0]) == 0.0
    assert spearman_rho([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman_rho([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert kendall_tau([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(4 / 6)
    assert vote([1.0, 0.0], "majority") == 0.5  # a split is a tie
    assert vote([1.0, 1.0, 0.0], "majority") == 1.0


def test_a_failed_dict_keeps_its_extras_and_counts_are_summed():
    from rewardhub.execution import Column
    from rewardhub.execution import column_metrics

    col = Column(3)
    col.put(0, {"score": 1.0, "judge_calls": 2}, "t", 0.0)
    failed = {"score": None, "failed": "judge call failed (timeout): x", "judge_calls": 3, "judge_failed": 3}
    col.put(1, failed, "t", 0.0)
    col.put(2, {"score": 0.0, "judge_calls": 1}, "t", 0.0)
    assert col.status[1] == "error" and col.errors[1] == "judge call failed (timeout): x"
    m = column_metrics("t", col)
    assert m["rewards/t/judge_calls"] == 6.0 and m["rewards/t/judge_failed"] == 3.0
    assert m["rewards/t/errors"] == 1.0


@pytest.mark.timeout(300)
def test_contract(stub):
    """`rewardhub test`'s contract (both executors) holds for the three judging rewards against the stub."""
    from rewardhub._contract import FAIL
    from rewardhub._contract import run_contract

    def each(body, n):
        user = body["messages"][1]["content"]
        if "CRITERIA:" in user:
            return rubric_judge(body, n)
        return 200, "Winner: A" if "ANSWER B:" in user else "Score: 4"

    stub.reset(each)
    kw = {"base_url": stub.url, "model": "m"}
    section = {"rewards": [{"name": "llm_judge_pairwise", "kwargs": {**kw, "against": "peers"}},
                           {"name": "llm_judge_rubric", "kwargs": {**kw, "criteria": CRITERIA[:5]}},
                           {"name": "llm_judge_sampled", "kwargs": {**kw, "samples": 2}}]}
    checks = run_contract(section, executors=("inline", "process"))
    assert [f"{c.term} / {c.contract}: {c.detail}" for c in checks if c.status == FAIL] == []
    assert {c.term for c in checks} == {"llm_judge_pairwise", "llm_judge_rubric", "llm_judge_sampled"}


@pytest.mark.timeout(120)
def test_adapters_trajectories_and_the_trainers_group_statistics(stub):
    """to_trl runs a tournament on a group, to_verl a rubric; a trajectory is judged by its chat; a failed
    response is NaN, which the trainer's group advantages leave out (advantage 0, not a loss)."""
    from rewardhub.adapters import to_trl
    from rewardhub.adapters import to_verl

    stub.reset(pair_judge(near=0.5))
    trl = to_trl("llm_judge_pairwise", kwargs={"base_url": stub.url, "model": "m", "mode": "tournament"})
    got = trl(prompts=["trl"] * 4, completions=["q=1", "q=5", "q=3", "q=9"])
    assert got == pytest.approx([0, 2 / 3, 1 / 3, 1])
    stub.reset(lambda body, n: (200, "Criterion 1: YES - it does"))
    verl = to_verl("llm_judge_rubric", kwargs={"base_url": stub.url, "model": "m", "criteria": ["says x"]})
    out = verl("d", "x y", "gt", {})
    assert out["score"] == 1.0 and out["criteria"][0]["reason"] == "it does" and out["judge_calls"] == 1
    stub.reset(pair_judge(near=0.5))
    chats = [[{"role": "user", "content": "traj"}, {"role": "assistant", "content": f"q={q}"}]
             for q in (2, 8)]
    res = judged(stub, "llm_judge_pairwise", [{"messages": c, "extra_info": {"uid": "t"}} for c in chats],
                 against="peers")
    user = stub.requests[0]["body"]["messages"][1]["content"]  # the trajectory's final reply, marked
    assert res.scores == [0.0, 1.0] and "\nq=8\n" in user and "\n[user] traj\n" in user
    torch = pytest.importorskip("torch")
    from rewardhub_trainer.losses import group_advantages

    stub.reset(lambda body, n: (503, "down") if "q=3g" in body["messages"][1]["content"] else
               pair_judge(near=0.5)(body, n))
    res = judged(stub, "llm_judge_pairwise", group([1, 3, 9], tag="g"), mode="tournament", retries=0,
                 pattern="vs_reference")
    assert math.isnan(res.scores[1]) and res.scores[0] == 0.0 and res.scores[2] == 1.0
    adv = group_advantages(torch.tensor([res.scores], dtype=torch.float64))[0].tolist()
    assert adv[1] == 0.0 and adv[0] == pytest.approx(-1.0, abs=1e-4)
    assert adv[2] == pytest.approx(1.0, abs=1e-4)


def test_bad_kwargs_are_told_before_any_call(stub):
    stub.reset(pair_judge())
    rows = group([1, 2], uid="k", tag="k")
    for kwargs, said in (({"samples": 0}, "samples=0 is not valid"),
                         ({"aggregate": "mode"}, "aggregate='mode'"),
                         ({"template": "Which is better? {prompt}"}, "the template has no {a}, {b}"),
                         ({"mode": "league"}, "mode='league' is not valid"),
                         ({"mode": "tournament", "pattern": "swiss"}, "pattern='swiss' is not valid")):
        res = judged(stub, "llm_judge_pairwise", rows, **kwargs)
        assert all(said in e["llm_judge_pairwise"] for e in res.errors), (kwargs, res.errors)
    res = judged(stub, "llm_judge_rubric", [{"prompt": "p", "response": "r"}], criteria=[{"weight": 2}])
    assert "criteria[0] = {'weight': 2} has no text" in res.errors[0]["llm_judge_rubric"]
    assert len(stub.requests) == 0


@pytest.mark.timeout(120)
def test_calibration_of_a_pairwise_judge_reports_its_position_bias(stub, tmp_path):
    """Gold rows: is the response better than the reference? A judge that always picks the first answer
    on near-ties flips with the order on each near-tie: the position-bias rate is their share."""
    from rewardhub.builtin.judging.calibrate import calibrate_term
    from rewardhub.builtin.judging.calibrate import gold_rows

    gold = tmp_path / "pairs.jsonl"
    rows = [(q, r) for q in range(2, 8) for r in (q - 3, q - 0.5, q + 0.5, q + 3)]  # half near-ties
    lines = [{"prompt": f"cal {q} {r}", "response": f"q={r}", "ground_truth": f"q={q}", "label": int(r > q)}
             for q, r in rows]
    gold.write_text("".join(json.dumps(line) + "\n" for line in lines))
    stub.reset(pair_judge(p_first=1.0, near=1.0))
    with Runner.from_config({"rewards": [{"name": "llm_judge_pairwise", "kwargs": {
            "base_url": stub.url, "model": "m"}}]}) as runner:
        fig = calibrate_term(runner.terms[0], *gold_rows(str(gold)))
    assert fig["rows"] == 24 and fig["judge_calls"] == 48 and fig["position_bias"] == 0.5
    # a near-tie is a tie (0.5), halfway between the labels: the higher label is taken, so the 6 near-ties
    # labelled 0 disagree
    assert fig["agreement"] == 0.75 and fig["kappa"] == pytest.approx(0.5)


@pytest.mark.timeout(120)
def test_train_refuses_a_judge_under_its_calibration(stub, tmp_path):
    """The trainer's reward validation (what `rewardhub-train` runs before any actor starts) applies the
    gate: a guessing judge is refused in one line naming the term and its kappa."""
    from rewardhub.builtin.judging import calibrate
    from rewardhub.config.schema import validate_reward
    from rewardhub.errors import UsageError
    from rewardhub_trainer.rewards import validate_rewards

    gold = tmp_path / "gold.jsonl"
    write_gold(gold, 60)
    calibrate.FIGURES.clear()
    stub.reset(score_judge(guess=True, seed=5))
    reward = validate_reward({"rewards": [{"name": "llm_judge_sampled", "kwargs": {
        "base_url": stub.url, "model": "m", "template": "train gate {response}"},
        "calibration": {"gold": str(gold), "min_kappa": 0.5}}]})
    with pytest.raises(UsageError) as err:
        validate_rewards(reward)
    said = str(err.value)
    assert said.count("\n") == 0 and "'llm_judge_sampled' fails its calibration: kappa" in said
    assert list(calibrate.FIGURES.values())[0]["rows"] == 60  # summary.json's calibration
