"""verl batches through rewardhub's verl managers (real verl 0.9.1 DataProto, verl's loader): a failed
reward call is flagged with its error in reward_extra_info and follows on_failure; batches verl's
naive manager reads (no prompts, a float mask, extra_info as a JSON string) are read the same; a row
that cannot be read fails alone, flagged with an error naming the field, and the others are scored."""

from __future__ import annotations

import math

import pytest
from test_verl_manager import COMMON
from test_verl_manager import _run

CASES = COMMON + r'''
import logging
import math
from verl.trainer.ppo.reward import load_reward_manager
from verl.workers.reward_manager import get_reward_manager_cls

tok = CharTokenizer()
FLAKY, NEEDS, VERL_FN = sys.argv[1], sys.argv[2], sys.argv[3]


def yaml_with(policy, path=FLAKY):
    p = f"rh_{policy}.yaml"
    with open(p, "w") as f:
        f.write(f"reward:\n  rewards:\n    - {{path: {path}, function: flaky, on_failure: {policy}}}\n")
    return p


def loop(cfg, data):
    m = load_reward_manager(cfg, tok, reward_router_address=None, reward_model_tokenizer=None)
    return run_loop(m, data), m


ROWS4 = [("1+1=", "#### 2", "2"), ("2+2=", "raise", "4"), ("3+3=", "#### 6", "6"), ("4+4=", "#### 9", "8")]
out = {}


def case(name, fn):
    try:
        out[name] = fn()
    except Exception as exc:
        out[name] = {"error": f"{type(exc).__name__}: {exc}"}


for policy in ("zero", "nan", "drop", "raise"):
    case(f"policy_{policy}", lambda: [(r["reward_score"], r["reward_extra_info"]) for r in
                                      loop(config(None, yaml_with(policy)), batch(ROWS4))[0]])


def no_reward_model():
    d = batch(ROWS4)
    del d.non_tensor_batch["reward_model"]
    return loop(config(), d)[0]


def gt_none():
    d = batch(ROWS4)
    d.non_tensor_batch["reward_model"][1] = {"ground_truth": None}
    d.non_tensor_batch["reward_model"][2] = None
    rows = loop(config(None, yaml_with("zero", NEEDS)), d)[0]
    return [(r["reward_score"], r["reward_extra_info"]) for r in rows]


def variant(change):
    def go():
        d = batch(ROWS4[:1] + ROWS4[2:])
        change(d)
        return [[r["reward_score"], r["reward_extra_info"]["rewardhub_error"]] for r in loop(config(), d)[0]]
    return go


def set_nt(key, values):
    def change(d):
        arr = np.empty(len(values), dtype=object)
        arr[:] = values
        d.non_tensor_batch[key] = arr
    return change


def drop(key):
    def change(d):
        del d.batch[key]
    return change


def mask(fn):
    def change(d):
        d.batch["attention_mask"] = fn(d.batch["attention_mask"])
    return change


def no_data_source():  # verl's default scorer picks its function by data_source
    d = batch(ROWS4)
    del d.non_tensor_batch["data_source"]
    return loop(config(), d)[0]


def data_source_unknown():
    d = batch(ROWS4)
    d.non_tensor_batch["data_source"][:] = "my/unknown"
    return [(r["reward_score"], r["reward_extra_info"]["rewardhub_failed"],
             r["reward_extra_info"]["rewardhub_error"]) for r in loop(config(), d)[0]]


case("no_reward_model", no_reward_model)
case("no_data_source", no_data_source)
case("data_source_unknown", data_source_unknown)
case("gt_none", gt_none)
case("plain", variant(lambda d: None))
case("no_prompts", variant(drop("prompts")))
case("no_responses", variant(drop("responses")))
case("float_mask", variant(mask(lambda m: m.float())))
case("bool_mask", variant(mask(lambda m: m.bool())))
case("half_mask", variant(mask(lambda m: m.float() * 0.5)))
case("extra_info_json", variant(set_nt("extra_info", ['{"index": 0}', '{"index": 1}', '{"index": 2}'])))
case("extra_info_text", variant(set_nt("extra_info", ["index 0", "{}", "{}"])))
case("extra_info_list", variant(set_nt("extra_info", [[1, 2], {}, {}])))
case("reward_model_json", variant(set_nt("reward_model", ['{"ground_truth": "2"}', '{"ground_truth": "6"}',
                                                          '{"ground_truth": "8"}'])))
case("reward_model_number", variant(set_nt("reward_model", [2, 6, 8])))
case("empty", lambda: run_loop(load_reward_manager(config(), tok, reward_router_address=None,
                                                   reward_model_tokenizer=None), batch(ROWS4)[:0]))


class Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def one_by_one(policy):
    """Trajectories as verl's agent loop sends them (AgentLoopWorker._compute_score: each finished
    trajectory its own DataProto, its own run_single, all in flight at once), one of them malformed in
    each way; the rewardhub manager gathers them into one group."""
    rows = [("1+1=", "#### 2", "2"), ("2+2=", "#### 4", "4"), ("3+3=", "#### 6", "6"),
            ("4+4=", "raise", "8"), ("5+5=", "#### 10", "10"), ("6+6=", "#### 12", "13")]
    ds = [batch([r]) for r in rows]
    for k, d in enumerate(ds):
        d.non_tensor_batch["extra_info"][0] = {"index": k}
    ds[1].non_tensor_batch["extra_info"][0] = "index 1"        # not a dict
    del ds[2].non_tensor_batch["reward_model"]                 # no reward_model at all
    ds[4].non_tensor_batch["reward_model"][0] = {"answer": 10}  # no ground_truth in it
    records = Records()
    logging.getLogger("rewardhub.verl").addHandler(records)
    m = load_reward_manager(config(None, yaml_with(policy)), tok, reward_router_address=None,
                            reward_model_tokenizer=None)

    async def go():
        return await asyncio.gather(*(m.run_single(d) for d in ds), return_exceptions=True)

    got = m.loop.run_until_complete(go())
    logging.getLogger("rewardhub.verl").removeHandler(records)
    rows = [{"raised": f"{type(r).__name__}: {r}"} if isinstance(r, BaseException) else
            {"score": r["reward_score"], "failed": r["reward_extra_info"]["rewardhub_failed"],
             "error": r["reward_extra_info"]["rewardhub_error"]} for r in got]
    return {"rows": rows, "warnings": records.lines, "groups": m.batches, "counts": [m.scorer.scored,
                                                                                     m.scorer.failed]}


case("one_by_one_zero", lambda: one_by_one("zero"))
case("one_by_one_raise", lambda: one_by_one("raise"))


def gt_none_as_naive():
    """A ground truth of None reaches a verl compute_score as verl's naive manager passes it."""
    from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager
    from verl.trainer.ppo.reward import get_custom_reward_fn

    cfg = config(VERL_FN)
    d = batch(ROWS4)
    d.non_tensor_batch["reward_model"][1] = {"ground_truth": None}
    ours = run_loop(load_reward_manager(cfg, tok, reward_router_address=None, reward_model_tokenizer=None), d)
    theirs = run_loop(NaiveRewardManager(cfg, tok, get_custom_reward_fn(cfg)), d)
    keep = ("score", "gt", "rewardhub_failed")
    return {"ours": [[r["reward_score"], {k: r["reward_extra_info"].get(k) for k in keep}] for r in ours],
            "naive": [[r["reward_score"], {k: r["reward_extra_info"].get(k) for k in keep}] for r in theirs]}


case("gt_none_as_naive", gt_none_as_naive)


def batch_manager():
    manager_cls = get_reward_manager_cls("rewardhub")
    m = manager_cls(tokenizer=tok, num_examine=0, config=config(None, yaml_with("zero")))
    d = batch(ROWS4)
    del d.batch["prompts"]
    got = m(d, return_dict=True)
    return {"sums": got["reward_tensor"].sum(-1).tolist(),
            "extra": {k: [x if isinstance(x, str) or x is None else float(x) for x in v]
                      for k, v in got["reward_extra_info"].items()},
            "counts": [m.scorer.scored, m.scorer.failed]}


case("batch_manager", batch_manager)
print(json.dumps(out, default=lambda x: "nan" if isinstance(x, float) and math.isnan(x) else str(x)))
'''

VERL_FN = '''def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    if ground_truth is None:
        return {"score": 0.25, "gt": "None"}
    return {"score": float(solution_str.endswith(str(ground_truth))), "gt": str(ground_truth)}
'''

FLAKY = '''import re

def flaky(*, response, ground_truth, **kwargs):
    if response == "raise":
        raise ValueError("flaky failed on purpose")
    m = re.search(r"####\\s*(\\d+)", response)
    return 1.0 if m and m.group(1) == str(ground_truth) else 0.0
'''


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    d = tmp_path_factory.mktemp("verl_batches")
    (d / "flaky.py").write_text(FLAKY)
    (d / "verl_fn.py").write_text(VERL_FN)
    return _run(d, CASES, str(d / "flaky.py"), str(d / "flaky.py"), str(d / "verl_fn.py"))


def _nan(x):
    return x == "nan" or (isinstance(x, float) and math.isnan(x))


@pytest.mark.timeout(300)
def test_a_raising_sample_is_flagged_with_its_error_and_follows_on_failure(cases):
    zero = cases["policy_zero"]
    assert [s for s, _ in zero] == [1.0, 0.0, 1.0, 0.0]
    assert [i["rewardhub_failed"] for _, i in zero] == [0.0, 1.0, 0.0, 0.0]
    assert "flaky failed on purpose" in zero[1][1]["rewardhub_error"] and zero[0][1]["rewardhub_error"] == ""
    # a wrong answer is scored, a failure is not
    assert zero[1][1]["acc"] is None and zero[3][1]["acc"] == 0.0
    assert all(set(i) == set(zero[0][1]) for _, i in zero)  # verl stacks the first row's keys
    nan = cases["policy_nan"]
    assert _nan(nan[1][0]) and nan[1][1]["rewardhub_failed"] == 1.0 and nan[0][0] == 1.0
    drop = cases["policy_drop"]  # verl cannot leave a sample out: 0.0, flagged
    assert drop[1][0] == 0.0 and drop[1][1]["rewardhub_failed"] == 1.0
    assert "flaky failed on purpose" in cases["policy_raise"]["error"]


@pytest.mark.timeout(300)
def test_no_ground_truth_is_a_flag_on_that_row_never_a_silent_zero(cases):
    rows = cases["no_reward_model"]  # no row has the field: each is flagged with the error naming it
    assert [r["reward_score"] for r in rows] == [0.0] * 4
    for r in rows:
        info = r["reward_extra_info"]
        assert info["rewardhub_failed"] == 1.0 and info["acc"] is None
        assert "non_tensor_batch['reward_model']" in info["rewardhub_error"]
    gt = cases["gt_none"]  # a rewardhub reward that takes a ground truth is not called without one
    assert [s for s, _ in gt] == [1.0, 0.0, 0.0, 0.0]
    assert [i["rewardhub_failed"] for _, i in gt] == [0.0, 1.0, 1.0, 0.0]
    assert (
        "no ground truth" in gt[1][1]["rewardhub_error"] and "no ground truth" in gt[2][1]["rewardhub_error"]
    )


@pytest.mark.timeout(300)
def test_a_ground_truth_of_none_reaches_a_verl_function_as_verls_naive_passes_it(cases):
    got = cases["gt_none_as_naive"]
    assert [s for s, _ in got["ours"]] == [s for s, _ in got["naive"]] == [1.0, 0.25, 1.0, 0.0]
    assert [i["gt"] for _, i in got["ours"]] == [i["gt"] for _, i in got["naive"]] == ["2", "None", "6", "8"]
    assert [i["rewardhub_failed"] for _, i in got["ours"]] == [0.0] * 4


@pytest.mark.timeout(300)
def test_each_trajectory_fails_alone_with_its_error_and_a_warning(cases):
    """One trajectory with a bad extra_info, one without reward_model, one whose reward raises and one
    without a ground truth arrive with two good ones: those two get their scores."""
    got = cases["one_by_one_zero"]
    assert got["groups"] == 1  # they were scored together
    rows = got["rows"]
    assert [r["score"] for r in rows] == [1.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    assert [r["failed"] for r in rows] == [0.0, 1.0, 1.0, 1.0, 1.0, 0.0]  # the last is a wrong answer
    assert "non_tensor_batch['extra_info'][0] is the string 'index 1'" in rows[1]["error"]
    assert "no non_tensor_batch['reward_model']" in rows[2]["error"]
    assert "flaky failed on purpose" in rows[3]["error"]
    assert "without 'ground_truth'" in rows[4]["error"]
    assert got["counts"] == [6, 4]
    [warning] = got["warnings"]  # one line for the group, naming the rows
    assert warning.startswith("rewardhub: 4 of 6 verl rows not scored")
    assert "index=2" in warning and "index=3" in warning and "and 1 more" in warning
    raised = cases["one_by_one_raise"]["rows"]  # on_failure: raise fails those trajectories only
    assert [r.get("score") for r in raised] == [1.0, None, None, None, None, 0.0]
    assert all(r["raised"].startswith("RewardExecutionError: verl row (") for r in raised[1:5])
    assert "flaky failed on purpose" in raised[3]["raised"] and "index=3" in raised[3]["raised"]


@pytest.mark.timeout(300)
def test_verls_default_scorer_without_a_known_data_source(cases):
    rows = cases["no_data_source"]  # the field is missing: each row flagged with the error naming it
    assert [r["reward_score"] for r in rows] == [0.0] * 4
    assert all("non_tensor_batch['data_source']" in r["reward_extra_info"]["rewardhub_error"] for r in rows)
    rows = cases["data_source_unknown"]  # verl has no function for it: every row flagged with verl's error
    assert [(s, f) for s, f, _ in rows] == [(0.0, 1.0)] * 4
    assert all("NotImplementedError" in e and "my/unknown" in e for _, _, e in rows)


@pytest.mark.timeout(300)
def test_batches_naive_reads_are_read_the_same(cases):
    plain = cases["plain"]
    assert plain == [[1.0, ""], [1.0, ""], [0.0, ""]]
    for name in ("no_prompts", "float_mask", "bool_mask", "extra_info_json", "reward_model_json"):
        assert cases[name] == plain, (name, cases[name])
    assert cases["empty"] == []


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "name,field,bad",
    [
        ("no_responses", "batch['responses']", [0, 1, 2]),
        ("half_mask", "attention_mask (torch.float32) of row 0 holds 0.5", [0, 1, 2]),
        ("extra_info_text", "non_tensor_batch['extra_info'][0] is the string", [0]),
        ("extra_info_list", "non_tensor_batch['extra_info'][0] is list", [0]),
        ("reward_model_number", "non_tensor_batch['reward_model'][0] is int", [0, 1, 2]),
    ],
)
def test_a_malformed_row_fails_alone_with_an_error_naming_the_field(cases, name, field, bad):
    rows = cases[name]
    assert [i for i, (_, err) in enumerate(rows) if err] == bad
    assert all(field in rows[i][1] and rows[i][0] == 0.0 for i in bad), rows
    assert [score for i, (score, _) in enumerate(rows) if i not in bad] == [
        s for i, (s, _) in enumerate(cases["plain"]) if i not in bad]


@pytest.mark.timeout(300)
def test_batch_manager_flags_failures_and_counts_them(cases):
    got = cases["batch_manager"]
    assert got["sums"] == [1.0, 0.0, 1.0, 0.0]
    assert got["extra"]["rewardhub_failed"] == [0.0, 1.0, 0.0, 0.0]
    assert got["extra"]["acc"] == [1.0, None, 1.0, 0.0]
    assert got["counts"] == [4, 1]
