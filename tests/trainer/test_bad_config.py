"""A bad config fails before Ray starts (Ray is not even imported), naming the key and the fix, through
the core CLI's one error handler: one ``ERROR:`` line (a hint may follow, indented), exit code 2, no
traceback, the same for ``rewardhub train`` and ``rewardhub-train``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

PROBE = """
import json, sys
if sys.argv[1] == "--no-vllm":  # as if vLLM were not installed
    sys.modules["vllm"] = None
    del sys.argv[1]
from rewardhub_trainer.cli import main
rc = main(sys.argv[1:])
print(json.dumps({"rc": rc, "ray_imported": "ray" in sys.modules, "torch_imported": "torch" in sys.modules}))
"""


def _run(tmp_path: Path, *overrides: str) -> tuple[dict, str]:
    cfg = tmp_path / "c.yaml"
    cfg.write_text((EXAMPLES / "tiny.yaml").read_text())
    proc = subprocess.run([sys.executable, "-c", PROBE, str(cfg), *overrides, "--output", str(tmp_path / "o"),
                           "--no-progress"], capture_output=True, text=True, timeout=120)
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def _one_error_line(err: str) -> str:
    """The one ``ERROR:`` line of ``err``; what follows it is indented (the core CLI's format)."""
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if not ln.startswith("  ")]
    errors = [ln for ln in lines if ln.startswith("ERROR: ")]
    assert len(errors) == 1, err
    return errors[0]


@pytest.mark.parametrize(
    ("override", "line", "hint"),
    [
        ("trainer.mode=asynk", "ERROR: trainer.mode='asynk' is not valid", "  allowed: sync, fully_async"),
        (
            "trainer.totl_steps=3",
            "ERROR: unknown key trainer.totl_steps",
            "  did you mean trainer.total_steps? ",
        ),
        (
            "rollout.n=1",
            "ERROR: rollout.n=1 is not valid: GRPO needs at least 2 responses per prompt (e.g. rollout.n=4)",
            "  allowed: a value >= 2",
        ),
        (
            "reward.workers.num_workerz=2",
            "ERROR: unknown key reward.workers.num_workerz",
            "  did you mean reward.workers.num_workers? ",
        ),
        (  # issue 43 §1: it trained on empty responses
            "rollout.stop=['']",
            "ERROR: rollout.stop=[''] is not valid: an empty stop string matches at once: every response "
            "would be empty",
            "  remove the empty string",
        ),
        (  # issue 43 §3: a torch shape error from the rollouter, after Ray started
            "model.tiny.num_attention_heads=3",
            "ERROR: model.tiny.num_attention_heads=3 does not fit model.tiny.hidden_size=64: each head gets "
            "hidden_size / num_attention_heads dimensions, which must be a whole even number",
            "  set model.tiny.num_attention_heads to one of 1, 2, 4, 8, 16, 32 ",
        ),
        (  # issue 43 §3: an error about model folders and memory, from the actors
            "trainer.call_timeout_s=1e-9",
            "ERROR: trainer.call_timeout_s=1e-09 is not valid: every call on an actor (loading weights, a "
            "batch on a busy host) would count as hung",
            "  allowed: 0 (no deadline) or a value >= 10 (seconds; default 1800)",
        ),
        (
            "model.tiny.num_key_value_heads=3",
            "ERROR: model.tiny.num_key_value_heads=3 does not divide model.tiny.num_attention_heads=2",
            "  each key/value head serves a whole number of attention heads",
        ),
    ],
)
def test_bad_trainer_key_fails_before_ray(tmp_path, override, line, hint):
    result, err = _run(tmp_path, override)
    assert result == {"rc": 2, "ray_imported": False, "torch_imported": False}
    assert err.startswith("ERROR: ")
    assert _one_error_line(err) == line
    assert err.splitlines()[1].startswith(hint)
    assert not (tmp_path / "o").exists()


def test_missing_model_path_names_the_key(tmp_path):
    cfg = yaml.safe_load((EXAMPLES / "tiny.yaml").read_text())
    cfg["model"] = {"path": str(tmp_path / "nowhere")}
    path = tmp_path / "c2.yaml"
    path.write_text(yaml.safe_dump(cfg))
    proc = subprocess.run([sys.executable, "-c", PROBE, str(path), "--output", str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=120)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["rc"] == 2 and not result["ray_imported"]
    assert (
        _one_error_line(proc.stderr)
        == f"ERROR: model.path={str(tmp_path / 'nowhere')!r} is not valid: no such folder"
    )
    assert "model.builtin=smollm2-135m" in proc.stderr


def test_unknown_reward_fails_before_ray(tmp_path):
    result, err = _run(tmp_path, "reward.rewards=[{name: acuracy}]")
    assert result["rc"] == 2 and not result["ray_imported"]
    assert _one_error_line(err).startswith("ERROR: reward.rewards[0].name: unknown reward 'acuracy'")
    assert "rewardhub list" in err


def _rewardhub(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rewardhub", *args], capture_output=True, text=True, timeout=180, cwd=cwd
    )


def test_train_errors_go_through_the_core_cli_handler(tmp_path):
    """``rewardhub train`` and ``rewardhub-train`` print the same one line and exit code as ``score``
    would: a bad key, an unknown reward, a missing data file, an override after an option."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text((EXAMPLES / "tiny.yaml").read_text())
    out = str(tmp_path / "o")
    cases = [
        (["trainer.totl_steps=3"], "ERROR: unknown key trainer.totl_steps"),
        (["reward.rewards=[{name: acuracy}]"], "ERROR: reward.rewards[0].name: unknown reward 'acuracy'"),
        ([f"data.train_files={tmp_path / 'nope.jsonl'}"],
         f"ERROR: data.train_files: no such file or folder {str(tmp_path / 'nope.jsonl')!r}"),
    ]
    for overrides, line in cases:
        res = _rewardhub("train", str(cfg), *overrides, "--output", out, "--no-progress")
        assert res.returncode == 2, res.stderr
        assert _one_error_line(res.stderr).startswith(line), res.stderr
        alone = subprocess.run(
            [
                sys.executable,
                "-m",
                "rewardhub_trainer",
                str(cfg),
                *overrides,
                "--output",
                out,
                "--no-progress",
            ],
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert (alone.returncode, alone.stderr) == (res.returncode, res.stderr)
    res = _rewardhub("train", str(cfg), "--output", out, "trainer.total_steps=2")
    assert res.returncode == 2
    assert _one_error_line(res.stderr).startswith(
        "ERROR: override 'trainer.total_steps=2' comes after an option"
    )
    assert not (tmp_path / "o").exists()


def test_unusable_vllm_is_refused_before_ray(tmp_path):
    """The vLLM probe runs where engines are checked (before Ray), not in config validation."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text((EXAMPLES / "tiny.yaml").read_text())
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            PROBE,
            "--no-vllm",
            str(cfg),
            "rollout.engine=vllm",
            "--output",
            str(tmp_path / "o"),
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["rc"] == 2 and not result["ray_imported"]
    assert _one_error_line(proc.stderr).startswith("ERROR: rollout.engine=vllm, but vllm is not importable")
    assert "or use rollout.engine=transformers" in proc.stderr
