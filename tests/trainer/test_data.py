"""The trainer on the user's data: verl-format parquet, JSONL and save_to_disk folders, prompt length limits,
evaluation on data.val_files, and bad data failing before Ray starts."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from rewardhub.errors import RewardhubDeprecationWarning
from rewardhub.errors import UsageError
from rewardhub_trainer.config import DataConfig

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

TINY = {"arch": "qwen2", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
        "num_key_value_heads": 1}
LONG = " Think about it step by step." * 10  # pushes a prompt past max_prompt_length=80 (ByT5: bytes)


def verl_rows(n: int, *, offset: int = 0, long_every: int = 0) -> list[dict]:
    """Rows as verl's preprocessing scripts write them (two data sources)."""
    rows = []
    for i in range(n):
        question = f"What is {(offset + i) % 9} + 1?" + (LONG if long_every and i % long_every == 0 else "")
        rows.append({"data_source": "openai/gsm8k" if i % 2 else "simple_math", "ability": "math",
                     "prompt": [{"role": "system", "content": "Answer with a number."},
                                {"role": "user", "content": question}],
                     "reward_model": {"style": "rule", "ground_truth": str((offset + i) % 9 + 1)},
                     "extra_info": {"index": offset + i, "split": "train"}})
    return rows


#: a reward that checks what it receives: the row's ground truth, data source and extra_info, and the
#: prompt as the model saw it (the plain template applied to the messages)
CHECK_REWARD = textwrap.dedent("""
    def compute_score(*, prompt, response, ground_truth, data_source, extra_info):
        ok = (ground_truth == str(extra_info["index"] % 9 + 1)
              and data_source in ("openai/gsm8k", "simple_math")
              and extra_info["ability"] == "math"
              and prompt.startswith("Question: What is ") and prompt.endswith("\\nAnswer:"))
        return 1.0 if ok else 0.0
""")


def _config(tmp_path: Path, mode: str, **data) -> str:
    (tmp_path / "check.py").write_text(CHECK_REWARD)
    cfg = {
        "trainer": {"mode": mode, "total_steps": 3, "lr": 3e-3, "val_before_train": True, "test_freq": 0},
        "model": {"tiny": TINY},
        "rollout": {"n": 2, "prompts_per_step": 2, "max_new_tokens": 8},
        "data": {"template": "plain", **data},
        "reward": {"rewards": [{"name": "math_verify"},
                               {"path": str(tmp_path / "check.py"), "weight": 0.0}]},
    }
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


@pytest.mark.ray
@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", ["sync", "fully_async"])
def test_verl_parquet_trains_with_evaluation(ray_session, tmp_path, mode, capsys):
    from rewardhub_trainer.cli import train

    pq.write_table(pa.Table.from_pylist(verl_rows(20, long_every=5)), tmp_path / "train.parquet")
    pq.write_table(pa.Table.from_pylist(verl_rows(4, offset=100)), tmp_path / "val.parquet")
    cfg = _config(
        tmp_path,
        mode,
        train_files=str(tmp_path / "train.parquet"),
        val_files=[str(tmp_path / "val.parquet")],
        max_prompt_length=80,
        filter_overlong_prompts=True,
    )
    out = tmp_path / "run"
    summary = train(cfg, output=str(out))
    # 4 of the 20 training prompts are too long: left out, counted and reported
    assert summary["data"] == {"train_rows": 20, "train_filtered": 4, "val_rows": 4, "val_filtered": 0}
    assert "20 train rows (4 filtered: longer than data.max_prompt_length=80 tokens), 4 val rows" in \
        capsys.readouterr().err
    assert summary["steps"] == 3 and summary["accounting_exact"]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train_rows = [r for r in rows if "reward/mean" in r]
    val_rows = [r for r in rows if "val/score" in r]
    assert [r["step"] for r in train_rows] == [1, 2, 3]
    for r in train_rows:  # the rewards got the row's fields and the rendered prompt
        assert r["rewards/compute_score/mean"] == 1.0 and r["rewards/math_verify/count"] == 4
    # evaluation before the first step and at the end, per data source
    assert [r["step"] for r in val_rows] == [0, 3]
    for r in val_rows:
        assert r["val/samples"] == 4.0 and r["val/compute_score/mean"] == 1.0
        assert 0.0 <= r["val/score"] <= 1.0 and 0.0 <= r["val/math_verify/mean"] <= 1.0
        for ds in ("openai/gsm8k", "simple_math"):
            assert f"val/{ds}/score" in r and r[f"val/{ds}/compute_score/mean"] == 1.0
    assert [v["step"] for v in summary["val"]] == [0, 3]
    assert (out / "metrics.png").exists()
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(out / "tensorboard"))
    acc.Reload()
    assert [e.step for e in acc.Scalars("val/score")] == [0, 3]
    assert "val/openai/gsm8k/math_verify/mean" in acc.Tags()["scalars"]


def test_jsonl_save_to_disk_and_parquet_load_the_same_prompts(tmp_path):
    datasets = pytest.importorskip("datasets")
    from rewardhub_trainer.data import load_files

    rows = verl_rows(7)
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "d.parquet")
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "hf"))
    cfg = DataConfig()
    loaded = [load_files(str(tmp_path / name), cfg, "data.train_files", ["math_verify"])
              for name in ("d.jsonl", "d.parquet", "hf")]
    strip = [[(p.question, p.ground_truth, p.data_source, p.extra_info, p.messages) for p in items]
             for items in loaded]
    assert strip[0] == strip[1] == strip[2]
    assert strip[0][3] == (
        "What is 3 + 1?",
        "4",
        "openai/gsm8k",
        {"index": 3, "split": "train", "ability": "math"},
        tuple(rows[3]["prompt"]),
    )
    # plain rows, other column names
    (tmp_path / "p.jsonl").write_text(json.dumps({"q": "2+2?", "sol": "4", "data_source": "x"}) + "\n")
    plain = load_files(
        str(tmp_path / "p.jsonl"), DataConfig(prompt_key="q", answer_key="sol"), "data.train_files"
    )
    assert [(p.question, p.ground_truth, p.messages) for p in plain] == [("2+2?", "4", None)]


def test_render_filters_or_truncates_long_prompts():
    from transformers import ByT5Tokenizer

    from rewardhub_trainer.data import Prompt
    from rewardhub_trainer.data import PromptDataset
    from rewardhub_trainer.data import render

    tok = ByT5Tokenizer()  # one token per byte
    items = [Prompt("short", "1", "s", where="f, row 1"), Prompt("x" * 50, "2", "s", where="f, row 2")]
    ds = PromptDataset(items)
    plain = DataConfig(template="plain", max_prompt_length=30)
    kept, filtered = render(
        ds,
        tok,
        DataConfig(template="plain", max_prompt_length=30, filter_overlong_prompts=True),
        "data.train_files",
    )
    assert filtered == 1 and [p.text for p in kept.items] == ["Question: short\nAnswer:"]
    with pytest.raises(
        UsageError, match=r"f, row 2: the prompt is 68 tokens, longer than data.max_prompt_length=30"
    ):
        render(ds, tok, plain, "data.train_files")
    import dataclasses

    left, _ = render(ds, tok, dataclasses.replace(plain, truncation="left"), "k")
    right, _ = render(ds, tok, dataclasses.replace(plain, truncation="right"), "k")
    assert left.items[1].text == ("Question: " + "x" * 50 + "\nAnswer:")[-30:]
    assert right.items[1].text == ("Question: " + "x" * 50)[:30]
    assert left.items[0].text == "Question: short\nAnswer:"


PROBE = """
import json, sys
from rewardhub_trainer.cli import main
rc = main(sys.argv[1:])
print(json.dumps({"rc": rc, "ray_imported": "ray" in sys.modules}))
"""


@pytest.mark.parametrize("case", ["missing_column", "empty_file", "prompt_not_text", "unreadable_parquet",
                                  "no_ground_truth", "too_long"])
def test_bad_data_is_one_error_before_ray(tmp_path, case):
    rows = verl_rows(3)
    data = tmp_path / "train.jsonl"
    extra: dict = {}
    if case == "missing_column":
        rows[1] = {k: v for k, v in rows[1].items() if k != "prompt"}
        expected = f"ERROR: {data}, row 2: no column 'prompt' or 'question'"
    elif case == "empty_file":
        rows = []
        expected = f"ERROR: {data}: the file has no rows"
    elif case == "prompt_not_text":
        rows[2]["prompt"] = {"text": "not messages"}
        expected = f"ERROR: {data}, row 3, column 'prompt': the prompt is neither text nor chat messages"
    elif case == "unreadable_parquet":
        data = tmp_path / "train.parquet"
        expected = f"ERROR: {data}: cannot be read as parquet"
    elif case == "no_ground_truth":
        rows[1]["reward_model"] = {"style": "rule"}
        expected = (
            f"ERROR: {data}, row 2: no column 'reward_model.ground_truth' or 'ground_truth' or 'answer' "
            "(the ground truth), which reward 'math_verify' needs"
        )
    else:
        rows[0]["prompt"][1]["content"] += LONG
        extra = {"max_prompt_length": 80}
        expected = f"ERROR: {data}, row 1: the prompt is"
    if case == "unreadable_parquet":
        data.write_bytes(b"PAR1 cut short")
    else:
        data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = _config(tmp_path, "sync", train_files=str(data), **extra)
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, cfg, "--output", str(tmp_path / "o"), "--no-progress"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result == {"rc": 2, "ray_imported": False}, proc.stderr
    assert proc.stderr.startswith(expected), proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "o").exists()


#: in the shape of verl's examples/grpo_trainer/run_qwen2-7b*.sh (trainer.n_gpus_per_node / trainer.nnodes /
#: rollout.tensor_model_parallel_size are left out: the resource keys are mapped by another table)
LAUNCH = """\
set -x

python3 -m verl.trainer.main_ppo \\
    algorithm.adv_estimator=grpo \\
    data.train_files=train.parquet \\
    data.val_files=val.parquet \\
    data.train_batch_size=2 \\
    data.val_batch_size=4 \\
    data.max_prompt_length=120 \\
    data.max_response_length=8 \\
    data.filter_overlong_prompts=True \\
    data.truncation='error' \\
    actor_rollout_ref.model.path=$MODEL_PATH \\
    actor_rollout_ref.actor.optim.lr=1e-6 \\
    actor_rollout_ref.model.use_remove_padding=True \\
    actor_rollout_ref.actor.ppo_mini_batch_size=2 \\
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4 \\
    actor_rollout_ref.actor.use_kl_loss=True \\
    actor_rollout_ref.actor.kl_loss_coef=0.001 \\
    actor_rollout_ref.actor.kl_loss_type=low_var_kl \\
    actor_rollout_ref.actor.entropy_coeff=0 \\
    actor_rollout_ref.actor.clip_ratio=0.2 \\
    actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean \\
    actor_rollout_ref.model.enable_gradient_checkpointing=True \\
    actor_rollout_ref.actor.fsdp_config.param_offload=False \\
    actor_rollout_ref.actor.fsdp_config.optimizer_offload=False \\
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16 \\
    actor_rollout_ref.rollout.name=hf \\
    actor_rollout_ref.rollout.gpu_memory_utilization=0.6 \\
    actor_rollout_ref.rollout.n=2 \\
    actor_rollout_ref.rollout.temperature=1.0 \\
    actor_rollout_ref.rollout.top_p=1.0 \\
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=16 \\
    actor_rollout_ref.ref.fsdp_config.param_offload=True \\
    algorithm.use_kl_in_reward=False \\
    algorithm.kl_ctrl.kl_coef=0.001 \\
    custom_reward_function.path=check.py \\
    trainer.critic_warmup=0 \\
    trainer.logger='["console","tensorboard"]' \\
    trainer.project_name='verl_grpo_example_gsm8k' \\
    trainer.experiment_name='qwen2_tiny_function_rm' \\
    trainer.save_freq=-1 \\
    trainer.test_freq=2 \\
    trainer.val_before_train=True \\
    trainer.total_training_steps=2 \\
    trainer.total_epochs=15 \\
    trainer.default_local_dir=run_out $@
"""

VERL_CHECK = ("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
              "    return 1.0 if ground_truth == str(extra_info['index'] % 9 + 1) else 0.0\n")


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_a_verl_launch_script_migrates_with_every_key_accounted_for_then_trains(
        ray_session, model_cache, tmp_path, monkeypatch):
    from rewardhub.config.overrides import parse_override
    from rewardhub.verl.scripts import read_script
    from rewardhub_trainer.cli import train
    from rewardhub_trainer.config import ModelConfig
    from rewardhub_trainer.config import parse_config
    from rewardhub_trainer.models import materialize

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MODEL_PATH", materialize(ModelConfig(tiny=TINY)))  # a local tiny model folder
    pq.write_table(pa.Table.from_pylist(verl_rows(12, long_every=4)), "train.parquet")
    pq.write_table(pa.Table.from_pylist(verl_rows(2, offset=50)), "val.parquet")
    (tmp_path / "check.py").write_text(VERL_CHECK)
    (tmp_path / "run_grpo.sh").write_text(LAUNCH)

    proc = subprocess.run([sys.executable, "-m", "rewardhub", "migrate", "run_grpo.sh", "--report", "json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    keys = [parse_override(w.text).key for w in read_script(LAUNCH).words]
    moved = {m["from"]: m["to"] for m in out["moved"]}
    dropped = {d["key"]: d["reason"] for d in out["dropped"]}
    native = [k for k in keys if k not in moved and k not in dropped]
    # every key is mapped, ignored with a reason, or one the trainer has under the same name
    assert native == [
        "data.train_files",
        "data.val_files",
        "data.max_prompt_length",
        "data.filter_overlong_prompts",
        "data.truncation",
        "trainer.logger",
        "trainer.project_name",
        "trainer.experiment_name",
        "trainer.test_freq",
        "trainer.val_before_train",
        "trainer.default_local_dir",
    ]
    assert all(dropped.values())
    assert moved["actor_rollout_ref.model.path"] == "model.path" and moved["data.train_batch_size"] == \
        "rollout.prompts_per_step"
    from omegaconf import OmegaConf

    # the migrated config is a valid trainer config ($MODEL_PATH too)
    parse_config(OmegaConf.create(out["config"]))

    with pytest.warns(RewardhubDeprecationWarning):
        summary = train("run_grpo.sh", output=None)  # the run folder is trainer.default_local_dir
    assert summary["steps"] == 2 and summary["accounting_exact"]
    assert summary["data"] == {"train_rows": 12, "train_filtered": 3, "val_rows": 2, "val_filtered": 0}
    assert [v["step"] for v in summary["val"]] == [0, 2]
    rows = [json.loads(line) for line in (tmp_path / "run_out" / "metrics.jsonl").read_text().splitlines()]
    assert all(r["rewards/compute_score/mean"] == 1.0 for r in rows if "reward/mean" in r)
    assert all(r["val/compute_score/mean"] == 1.0 for r in rows if "val/score" in r)
    state = json.loads(
        (tmp_path / "run_out" / "checkpoints" / "step_000002" / "trainer_state.json").read_text()
    )
    assert state["config"]["trainer"]["lr"] == 1e-6 and state["config"]["trainer"]["kl_coef"] == 0.001
    assert state["config"]["rollout"]["prompts_per_step"] == 2 and state["config"]["rollout"]["n"] == 2
