"""trainer.logger: unknown names and missing packages fail before Ray; wandb (offline) and MLflow (a local
folder) receive the step and evaluation metrics when installed."""

from __future__ import annotations

import importlib.util
import time

import pytest

from rewardhub.errors import UsageError
from rewardhub_trainer.loggers import Trackers
from rewardhub_trainer.loggers import logger_names


def test_names_are_checked(monkeypatch):
    assert logger_names(None) == [] and logger_names("console") == ["console"]
    assert logger_names(["console", "tensorboard", "file"]) == ["console", "tensorboard", "file"]
    with pytest.raises(UsageError, match=r"^trainer.logger\[1\]='swanlab' is not valid\n"
                                         r"allowed: console, tensorboard, file, wandb, mlflow$"):
        logger_names(["console", "swanlab"])
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in ("wandb", "mlflow")
                        else real(name, *a))
    with pytest.raises(
        UsageError,
        match=r"^trainer.logger\[1\]='wandb' is not valid: wandb is not installed\npip install wandb ",
    ):
        logger_names(["console", "wandb"])
    with pytest.raises(
        UsageError,
        match=r"^trainer.logger\[0\]='mlflow' is not valid: mlflow is not installed\npip install mlflow ",
    ):
        logger_names(["mlflow"])


def test_a_missing_tracker_is_an_error_before_ray(tmp_path, monkeypatch):
    from rewardhub_trainer.config import parse_config

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(
        UsageError, match=r"^trainer.logger\[0\]='wandb' is not valid: wandb is not installed"
    ):
        parse_config({"trainer": {"logger": ["wandb"]}, "model": {"tiny": {"arch": "qwen2"}},
                      "reward": {"rewards": [{"name": "exact_match"}]}})


def test_wandb_offline_gets_the_metrics(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    t = Trackers(["console", "wandb"], tmp_path, project="p", experiment="e", config={"trainer": {"lr": 0.1}})
    t.log(1, {"step": 1, "reward/mean": 0.5, "skip": "text", "nan": float("nan")})
    t.log(2, {"val/score": 0.75})
    t.close()
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    record = next(runs[0].glob("run-*.wandb"))  # wandb's record log (protobuf; no reader shipped)
    deadline = time.monotonic() + 60
    while b"val/score" not in record.read_bytes() and time.monotonic() < deadline:
        time.sleep(0.2)  # wandb's service process writes the log after finish() returns
    data = record.read_bytes()
    assert b"reward/mean" in data and b"val/score" in data and b"0.75" in data and b"skip" not in data


def test_mlflow_writes_to_the_run_folder(tmp_path, monkeypatch):
    mlflow = pytest.importorskip("mlflow")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)  # restored after the test
    t = Trackers(["mlflow"], tmp_path, project="proj", experiment="exp")
    t.log(1, {"reward/mean": 0.25})
    t.log(2, {"reward/mean": 0.5, "val/openai/gsm8k/score": 1.0})
    t.close()
    from rewardhub_trainer.loggers import local_mlflow_uri

    mlflow.set_tracking_uri(local_mlflow_uri(tmp_path))
    run = mlflow.search_runs(experiment_names=["proj"], output_format="list")[0]
    history = mlflow.MlflowClient().get_metric_history(run.info.run_id, "reward/mean")
    assert [(m.step, m.value) for m in history] == [(1, 0.25), (2, 0.5)]
    assert run.data.metrics["val/openai/gsm8k/score"] == 1.0 and run.info.run_name == "exp"
    assert (tmp_path / "mlruns").is_dir() or (tmp_path / "mlflow.db").is_file()
