"""Tasks (``rewardhub.tasks``): one task name gives the same rows, and the same scores, in
``rewardhub score``, the trainer, TRL and verl; ``rewardhub tasks`` lists the first-party plugins' tasks.

The plugins' ``rewardhub.tasks`` entry points are read from their pyproject files into installed-looking
distributions put first on ``sys.path`` (the shared venv holds the plugins as installed before the group
existed): what ``pip install`` of each plugin would declare, found by the real entry-point scan.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from rewardhub.cli import main
from rewardhub.testing import write_distribution

REPO = Path(__file__).resolve().parent.parent
TASK = "reasoning_gym.countdown"  # its score_answer reads the row's metadata (numbers, target)
SIZE, SEED = 6, 5


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The three first-party plugins' distributions, with the entry points their pyproject declares."""
    site = tmp_path_factory.mktemp("site")
    for plugin in ("rewardhub-math", "rewardhub-code", "rewardhub-reasoning-gym"):
        project = tomllib.loads((REPO / "plugins" / plugin / "pyproject.toml").read_text())["project"]
        write_distribution(site, project["name"], project["version"], project["entry-points"])
    old_env = os.environ.get("PYTHONPATH")
    sys.path.insert(0, str(site))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), old_env]))
    yield site
    sys.path.remove(str(site))
    if old_env is None:
        os.environ.pop("PYTHONPATH")
    else:
        os.environ["PYTHONPATH"] = old_env


def _oracle() -> tuple[list[str], list[float]]:
    """Responses (the gold expression, or a wrong one) and reasoning-gym's own scores of them."""
    import reasoning_gym

    ds = reasoning_gym.create_dataset("countdown", size=SIZE, seed=SEED)
    answers = [e["answer"] if i % 2 == 0 else "1 + 1" for i, e in enumerate(ds)]
    return answers, [float(ds.score_answer(a, e)) for a, e in zip(answers, ds)]


def test_tasks_lists_each_plugins_tasks_with_dist_reward_and_size(installed, capsys):
    assert main(["tasks", "--json"]) == 0
    tasks = {t["name"]: t for t in json.loads(capsys.readouterr().out)}
    assert {k: tasks[TASK][k] for k in ("dist", "kind", "size", "data_source", "reward")} == {
        "dist": "rewardhub-reasoning-gym", "kind": "rows", "size": 100,
        "data_source": "reasoning_gym/countdown", "reward": [{"name": TASK}]}
    math, code = tasks["math.arithmetic"], tasks["code.functions"]
    assert (math["reward"], math["kind"], code["reward"], code["kind"], code["size"]) == (
        [{"name": "math_verify"}], "rows", [{"name": "code_tests"}], "file", 8)
    assert main(["data", "reasoning_gym.countdwn", "-o", str(installed / "x.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "unknown task 'reasoning_gym.countdwn'" in err and f"did you mean: {TASK!r}" in err


MY_TASKS = """
import os

# plain mappings: the package needs nothing of rewardhub
SUMS = {"reward": "exact_match", "hf": "json",
        "hf_kwargs": {"data_files": os.path.join(os.path.dirname(__file__), "sums.jsonl"), "split": "train"}}
NO_DATA = {"reward": "exact_match"}
"""


def test_a_package_without_rewardhub_declares_an_hf_task_and_a_broken_one_is_named(tmp_path, monkeypatch,
                                                                                    capsys):
    pytest.importorskip("datasets")
    write_distribution(tmp_path, "my-tasks", "2.0", {"rewardhub.tasks": {
        "my.sums": "my_tasks:SUMS", "my.no_data": "my_tasks:NO_DATA"}}, {"my_tasks": MY_TASKS})
    (tmp_path / "sums.jsonl").write_text('{"question": "1+2?", "answer": "3"}\n'
                                         '{"question": "2+2?", "answer": "4"}\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["tasks", "--json"]) == 0
    tasks = {t["name"]: t for t in json.loads(capsys.readouterr().out)}
    sums = tasks["my.sums"]
    assert (sums["dist"], sums["version"], sums["kind"], sums["reward"]) == (
        "my-tasks", "2.0", "hf", [{"name": "exact_match"}])
    assert tasks["my.no_data"]["kind"] == "broken"
    assert "a task has exactly one of 'rows' (a generator), 'file' or 'hf'" in tasks["my.no_data"]["summary"]
    out = tmp_path / "rows.jsonl"
    assert main(["data", "my.sums", "--size", "1", "-o", str(out)]) == 0
    assert [json.loads(line) for line in out.read_text().splitlines()] == [
        {"data_source": "my.sums", "prompt": [{"role": "user", "content": "1+2?"}], "ability": "",
         "reward_model": {"style": "rule", "ground_truth": "3"}, "extra_info": {"index": 0}}]
    assert main(["data", "my.no_data", "-o", str(out)]) == 2
    assert "task 'my.no_data' (my-tasks 2.0) cannot be loaded: UsageError: " in capsys.readouterr().err


def test_math_and_code_tasks_rows_score_with_their_rewards(installed, tmp_path):
    from rewardhub.execution import Runner
    from rewardhub.tasks import get_task
    from rewardhub.tasks import task_rows

    rows = task_rows("math.arithmetic", size=2, seed=1)
    assert rows == task_rows("math.arithmetic", 2, seed=1) != task_rows("math.arithmetic", 2, seed=2)
    code = task_rows("code.functions", size=1)
    assert code[0]["extra_info"] == {"index": 0, "function": "add"}
    gold = rows[0]["reward_model"]["ground_truth"]
    samples = [{"response": f"\\boxed{{{gold}}}"}, {"response": "\\boxed{-1}"},
               {"response": "```python\ndef add(a, b):\n    return a + b\n```"}]
    for s, r in zip(samples, [*rows, *code]):
        s.update(prompt=r["prompt"], ground_truth=r["reward_model"]["ground_truth"],
                 data_source=r["data_source"])
    section = {"rewards": [{**t, "executor": "inline"} for name in ("math.arithmetic", "code.functions")
                           for t in get_task(name).rewards]}
    with Runner.from_config(section) as runner:
        res = runner.score(samples)
    assert [r["math_verify"] for r in res.rewards[:2]] == [1.0, 0.0]
    assert res.rewards[2]["code_tests"] == 1.0


@pytest.fixture(scope="module")
def written(installed, tmp_path_factory):
    """``rewardhub data TASK`` to JSONL and to parquet (the same rows, in verl's format), the responses,
    reasoning-gym's own scores of them, and a config holding the task's reward terms."""
    pq = pytest.importorskip("pyarrow.parquet")
    from rewardhub.tasks import get_task
    from rewardhub.tasks import task_rows

    tmp_path = tmp_path_factory.mktemp("task")
    answers, expected = _oracle()
    assert 1.0 in expected and len(set(expected)) == 2  # right and wrong answers
    jsonl, parquet = tmp_path / "rows.jsonl", tmp_path / "rows.parquet"
    for out in (jsonl, parquet):
        assert main(["data", TASK, "--size", str(SIZE), "--seed", str(SEED), "-o", str(out)]) == 0
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert pq.read_table(parquet).to_pylist() == rows == task_rows(TASK, SIZE, SEED)
    assert {r["data_source"] for r in rows} == {"reasoning_gym/countdown"}
    assert [r["extra_info"]["index"] for r in rows] == list(range(SIZE))
    assert all(r["prompt"][0]["role"] == "user" and r["reward_model"]["ground_truth"] for r in rows)
    config = tmp_path / "reward.yaml"
    config.write_text(yaml.safe_dump({"reward": get_task(TASK).reward_section}))
    return tmp_path, rows, answers, expected


def test_score_reads_the_task_rows_as_written(written, tmp_path, capsys):
    folder, rows, answers, expected = written
    with (tmp_path / "answered.jsonl").open("w") as f:
        f.writelines(json.dumps({**r, "response": f"<answer>{a}</answer>"}) + "\n"
                     for r, a in zip(rows, answers))
    scored = tmp_path / "scored.jsonl"
    answered = str(tmp_path / "answered.jsonl")
    assert main(["score", str(folder / "reward.yaml"), answered, "-o", str(scored)]) == 0
    capsys.readouterr()
    assert [json.loads(line)["score"] for line in scored.read_text().splitlines()] == expected


def test_the_trainer_loads_the_task_by_name_and_scores_it_the_same(written):
    """``data.source: TASK``: the trainer's prompts are the rows; its reward client (on a ``rewardhub serve``
    of the task's terms) gives the same scores."""
    from serve_process import Server

    from rewardhub_trainer.config import parse_config
    from rewardhub_trainer.data import load_dataset
    from rewardhub_trainer.generation import Completion
    from rewardhub_trainer.reward_client import RewardClient
    from rewardhub_trainer.rollouts import PromptBatch
    from rewardhub_trainer.rollouts import Rollout

    folder, rows, answers, expected = written
    with Server(folder / "reward.yaml") as server:
        cfg = parse_config({"model": {"tiny": {"arch": "qwen2"}},
                            "data": {"source": TASK, "size": SIZE, "seed": SEED},
                            "reward": {"remote": server.url, "rewards": []}})
        prompts = load_dataset(cfg.data).items
        assert [(p.question, p.ground_truth, p.data_source, p.extra_info) for p in prompts] == [
            (r["prompt"][0]["content"], r["reward_model"]["ground_truth"], r["data_source"],
             {**r["extra_info"], "ability": r["ability"]}) for r in rows]  # the trainer adds verl's ability
        groups = [[Completion([], [], [], f"<answer>{a}</answer>", True)] for a in answers]
        rollout = Rollout(PromptBatch(0, prompts, list(range(SIZE))), 0, groups, 0.0, os.getpid())
        client = RewardClient(cfg.reward)
        assert [g[0] for g in client.score(rollout).rewards or []] == expected
    # with no reward section, the task's own terms score it
    alone = parse_config({"model": {"tiny": {"arch": "qwen2"}}, "data": {"source": TASK}})
    assert [t.name for t in alone.reward.rewards] == [TASK]


def test_trl_scores_the_task_parquet_the_same(written):
    """The parquet as a ``datasets`` Dataset, through GRPOTrainer's own reward call."""
    import datasets
    from test_adapters import _trl_calculate_rewards

    from rewardhub.adapters import to_trl
    from rewardhub.tasks import get_task

    folder, rows, answers, expected = written
    inputs = list(datasets.load_dataset("parquet", data_files=str(folder / "rows.parquet"), split="train"))
    funcs = [to_trl(t) for t in get_task(TASK).rewards]
    completions = [f"<answer>{a}</answer>" for a in answers]
    got = _trl_calculate_rewards(funcs, inputs, [r["prompt"] for r in inputs], completions)
    # TRL stacks the rewards in a float32 tensor: each within float32's rounding (2**-24 relative)
    assert [row[0] for row in got] == pytest.approx(expected, rel=2**-24, abs=0)


def test_verl_scores_the_task_parquet_the_same(written, tmp_path):
    """verl's naive reward manager calls ``compute_score = to_verl(TASK)`` on the parquet's rows."""
    from test_adapters import _verl_env

    folder, rows, answers, expected = written
    env = _verl_env()
    module = tmp_path / "my_reward.py"
    module.write_text(f"from rewardhub.adapters import to_verl\ncompute_score = to_verl({TASK!r})\n")
    (tmp_path / "check.py").write_text(VERL_CHECK)
    check = [sys.executable, str(tmp_path / "check.py"), str(module), str(folder / "rows.parquet"),
             json.dumps(answers)]
    res = subprocess.run(check, capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads(res.stdout.strip().splitlines()[-1]) == expected


VERL_CHECK = r'''
import json, sys
import pyarrow.parquet as pq
from omegaconf import OmegaConf
from verl.trainer.ppo.reward import get_custom_reward_fn
from verl.workers.reward_manager.naive import NaiveRewardManager

cfg = OmegaConf.create({"reward": {"custom_reward_function": {"path": sys.argv[1], "name": "compute_score",
                                                              "reward_kwargs": {}}}})
manager = NaiveRewardManager(tokenizer=None, num_examine=0, compute_score=get_custom_reward_fn(cfg))
out = []
for row, answer in zip(pq.read_table(sys.argv[2]).to_pylist(), json.loads(sys.argv[3])):
    # the keyword call NaiveRewardManager makes for every sample, with the row's own columns
    got = manager.compute_score(data_source=row["data_source"], solution_str=f"<answer>{answer}</answer>",
                                ground_truth=row["reward_model"]["ground_truth"],
                                extra_info=row["extra_info"])
    assert got["rewardhub_failed"] == 0.0, got
    out.append(got["score"])
print(json.dumps(out))
'''
