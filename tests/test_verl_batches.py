"""verl batches through rewardhub's verl managers (real verl 0.9.1 DataProto, verl's loader): a failed
reward call is flagged with its error in reward_extra_info and follows on_failure; batches verl's
naive manager reads (no prompts, a float mask, extra_info as a JSON string) are read the same; a
batch that cannot be read is one error naming the field."""

from __future__ import annotations

import math

import pytest
from test_verl_manager import COMMON
from test_verl_manager import _run

CASES = COMMON + r'''
import math
from verl.trainer.ppo.reward import load_reward_manager
from verl.workers.reward_manager import get_reward_manager_cls

tok = CharTokenizer()
FLAKY, NEEDS = sys.argv[1], sys.argv[2]


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
        return [r["reward_score"] for r in loop(config(), d)[0]]
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
    return _run(d, CASES, str(d / "flaky.py"), str(d / "flaky.py"))


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
def test_no_ground_truth_is_an_error_or_a_flag_never_a_silent_zero(cases):
    err = cases["no_reward_model"]["error"]
    assert "non_tensor_batch['reward_model']" in err and "verl_default" in err
    gt = cases["gt_none"]
    assert [s for s, _ in gt] == [1.0, 0.0, 0.0, 0.0]
    assert [i["rewardhub_failed"] for _, i in gt] == [0.0, 1.0, 1.0, 0.0]
    assert (
        "no ground truth" in gt[1][1]["rewardhub_error"] and "no ground truth" in gt[2][1]["rewardhub_error"]
    )


@pytest.mark.timeout(300)
def test_verls_default_scorer_without_a_known_data_source(cases):
    err = cases["no_data_source"]["error"]  # the field is missing: one error naming it
    assert err.startswith("VerlBatchError: ") and "non_tensor_batch['data_source']" in err
    rows = cases["data_source_unknown"]  # verl has no function for it: every row flagged with verl's error
    assert [(s, f) for s, f, _ in rows] == [(0.0, 1.0)] * 4
    assert all("NotImplementedError" in e and "my/unknown" in e for _, _, e in rows)


@pytest.mark.timeout(300)
def test_batches_naive_reads_are_read_the_same(cases):
    plain = cases["plain"]
    assert plain == [1.0, 1.0, 0.0]
    for name in ("no_prompts", "float_mask", "bool_mask", "extra_info_json", "reward_model_json"):
        assert cases[name] == plain, (name, cases[name])
    assert cases["empty"] == []


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "name,field",
    [
        ("no_responses", "batch['responses']"),
        ("half_mask", "attention_mask (torch.float32) holds 0.5"),
        ("extra_info_text", "non_tensor_batch['extra_info'][0] is the string"),
        ("extra_info_list", "non_tensor_batch['extra_info'][0] is list"),
        ("reward_model_number", "non_tensor_batch['reward_model'][0] is int"),
    ],
)
def test_a_malformed_batch_is_one_error_naming_the_field(cases, name, field):
    err = cases[name]["error"]
    assert err.startswith("VerlBatchError: ") and field in err, err


@pytest.mark.timeout(300)
def test_batch_manager_flags_failures_and_counts_them(cases):
    got = cases["batch_manager"]
    assert got["sums"] == [1.0, 0.0, 1.0, 0.0]
    assert got["extra"]["rewardhub_failed"] == [0.0, 1.0, 0.0, 0.0]
    assert got["extra"]["acc"] == [1.0, None, 1.0, 0.0]
    assert got["counts"] == [4, 1]
