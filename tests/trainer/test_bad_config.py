"""A bad config fails before Ray starts (Ray is not even imported), naming the key and the fix."""

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


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("trainer.mode=asynk", ["trainer.mode:", "'fully_async'"]),
        ("trainer.totl_steps=3", ["trainer.totl_steps: unknown key", "trainer.total_steps"]),
        ("rollout.n=1", ["rollout.n:", "at least 2"]),
    ],
)
def test_bad_trainer_key_fails_before_ray(tmp_path, override, expected):
    result, err = _run(tmp_path, override)
    assert result == {"rc": 2, "ray_imported": False, "torch_imported": False}
    assert err.startswith("ERROR: ")
    for piece in expected:
        assert piece in err
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
    assert "model.path: no such folder" in proc.stderr and "model.builtin=smollm2-135m" in proc.stderr


def test_unknown_reward_fails_before_ray(tmp_path):
    result, err = _run(tmp_path, "reward.rewards=[{name: acuracy}]")
    assert result["rc"] == 2 and not result["ray_imported"]
    assert "acuracy" in err and "rewardhub list" in err
