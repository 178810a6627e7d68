"""`reward.remote: URL` wherever a reward config works (issue 37 §3): `rewardhub check` reaches the server
and compares its terms' provenance with this machine's, `rewardhub score` scores there, and TRL's and
verl's own code score through `to_trl(remote=...)`, `to_verl(remote=...)` and the `rewardhub` manager;
against real `rewardhub serve` processes, with the same scores as scoring here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from serve_process import Server
from test_adapters import _trl_calculate_rewards
from test_verl_manager import COMMON
from test_verl_manager import _run

from rewardhub.errors import UsageError

pytest.importorskip("aiohttp")

REPO = Path(__file__).resolve().parent.parent
EXAMPLE_CFG = REPO / "examples" / "score.yaml"  # math_verify + regex_match as boxed_format
VERL_COMPAT = REPO / ".venv" / "verl-compat"


@pytest.fixture(scope="module")
def server():
    with Server(EXAMPLE_CFG) as s:
        yield s


@pytest.fixture
def remote_cfg(server, tmp_path) -> Path:
    path = tmp_path / "remote.yaml"
    path.write_text(f"reward:\n  remote: {server.url}\n")
    return path


def test_score_on_the_server_equals_scoring_here(cli, remote_cfg, tmp_path):
    data = tmp_path / "rows.jsonl"
    rows = [json.loads(line) for line in (REPO / "examples" / "math_samples.jsonl").read_text().splitlines()]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows[:40]))
    there, here = tmp_path / "there.jsonl", tmp_path / "here.jsonl"
    summary = tmp_path / "s.json"
    remote = cli("score", str(remote_cfg), str(data), "-o", str(there), "--summary-json", str(summary))
    local = cli("score", str(EXAMPLE_CFG), str(data), "-o", str(here))
    assert remote.returncode == local.returncode == 0, remote.stderr
    assert there.read_text() == here.read_text()
    used = json.loads(summary.read_text())["rewards"]
    assert [(r["name"], r["remote"]) for r in used] == [(n, str(remote_cfg.read_text().split()[-1]))
                                                        for n in ("math_verify", "boxed_format")]


def test_check_reaches_the_server_and_compares_provenance(cli, remote_cfg, server):
    from rewardhub._commands.check import remote_terms
    from rewardhub.registry import build_registry
    from rewardhub.types import RewardSpec

    res = cli("check", str(remote_cfg))
    assert res.returncode == 0, res.stderr
    said = f"ok  reward.remote {server.url} math_verify: math_verify (entry-point rewardhub-math 0.1.0)"
    assert said in res.stdout
    assert "OK (2 reward term(s))" in res.stdout
    # this machine's math_verify from another version than the server's: scores would differ
    registry = build_registry({})
    registry._name2spec["math_verify"] = RewardSpec(name="math_verify", target="m:f", dist="rewardhub-math",
                                                    version="0.0.1")
    terms, problems = remote_terms({"remote": server.url}, registry, notes := [])
    assert [t["name"] for t in terms] == ["math_verify", "boxed_format"] and notes == []
    assert problems == [
        f"reward.remote: the server {server.url} scores 'math_verify' with math_verify from rewardhub-math "
        "0.1.0, and this machine has rewardhub-math 0.0.1\nscores here and on the server would differ: "
        "install the same version in both places"
    ]
    del registry._name2spec["math_verify"]  # installed on the server only: what reward.remote is for
    assert remote_terms({"remote": server.url}, registry, notes)[1] == []
    assert notes == ["reward.remote: math_verify installed on the server only (scored there)"]


def test_to_trl_with_a_remote_inside_trl(server):
    from rewardhub.adapters import to_trl

    prompts = ["What is 2+2?", "What is 3+3?", [{"role": "user", "content": "1+1?"}]]
    completions = ["\\boxed{4}", "it is 7", [{"role": "assistant", "content": "\\boxed{2}"}]]
    inputs = [{"prompt": p, "solution": s} for p, s in zip(prompts, ["4", "6", "2"])]
    there = [to_trl(remote=server.url), to_trl("math_verify", remote=server.url)]
    here = [to_trl({"name": "math_verify", "timeout_s": 5, "on_failure": "zero"}),
            to_trl("regex_match", kwargs={"pattern": "\\\\boxed\\{.+\\}"})]
    assert [f.__name__ for f in there] == ["remote", "math_verify"]
    got = _trl_calculate_rewards(there, inputs, prompts, completions)
    want = _trl_calculate_rewards(here, inputs, prompts, completions)
    # TRL holds rewards as float32: each value within its rounding (2**-24 relative) of the sum here
    assert [x for row in got for x in row] == pytest.approx(
        [x for m, box in want for x in (m + 0.1 * box, m)], rel=2**-23)
    assert want == [[1.0, 1.0], [0.0, 0.0], [1.0, 1.0]]
    with pytest.raises(UsageError, match="scores with math_verify, boxed_format, not .nope."):
        to_trl("nope", remote=server.url)(prompts, completions, solution=["4", "6", "2"])


@pytest.mark.timeout(300)
def test_verl_manager_and_to_verl_on_a_remote_score_as_here(server, remote_cfg, tmp_path):
    """In real verl: the reward loop with the `rewardhub` manager whose module.path YAML says
    reward.remote scores as the one naming the server's own config; verl's custom_reward_function loader
    and naive manager with ``to_verl("math_verify", remote=URL)`` give what ``to_verl("math_verify")``
    gives here (tests/test_adapters.py), extra metrics included."""
    module = tmp_path / "my_reward.py"
    module.write_text(f"from rewardhub.adapters import to_verl\n"
                      f"compute_score = to_verl('math_verify', remote={server.url!r})\n")
    script = COMMON + r'''
from verl.trainer.ppo.reward import get_custom_reward_fn
from verl.trainer.ppo.reward import load_reward_manager
from verl.workers.reward_manager.naive import NaiveRewardManager

out = {}
for key, path in (("there", sys.argv[1]), ("here", sys.argv[2])):
    ours = load_reward_manager(config(None, path), CharTokenizer(), reward_router_address=None,
                               reward_model_tokenizer=None)
    out[key] = [[r["reward_score"], r["reward_extra_info"]["math_verify"]]
                for r in run_loop(ours, batch(ROWS))]
fn = get_custom_reward_fn(OmegaConf.create({"reward": {"custom_reward_function": {
    "path": sys.argv[3], "name": "compute_score", "reward_kwargs": {}}}}))
manager = NaiveRewardManager(tokenizer=None, num_examine=0, compute_score=fn)
out["to_verl"] = [manager.compute_score(data_source="openai/gsm8k", solution_str=solution, ground_truth=gold,
                                        extra_info={"index": 0})
                  for solution, gold in [("so the answer is \\boxed{72}", "72"), ("it is 71", "72")]]
print(json.dumps(out))
'''
    out = _run(tmp_path, script, str(remote_cfg), str(EXAMPLE_CFG), str(module))
    assert out["there"] == out["here"] and {m for _, m in out["here"]} == {0.0, 1.0}
    ok = {"rewardhub_failed": 0.0, "rewardhub_error": ""}
    assert out["to_verl"] == [{"score": 1.0, "acc": 1.0, "extracted": 1.0, **ok},
                              {"score": 0.0, "acc": 0.0, "extracted": 1.0, **ok}]
