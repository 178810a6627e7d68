"""Experiment trackers named by ``trainer.logger`` (verl's spelling): Weights & Biases and MLflow.

``console`` (the progress bar and the report), ``tensorboard`` and ``file`` (``metrics.jsonl``) are
always written, so naming them changes nothing. ``wandb`` and ``mlflow`` get every step's metrics and
every evaluation's, when their package is installed; a missing one is an error before Ray starts.
wandb runs online when logged in, or offline with ``WANDB_MODE=offline`` (its files go to the run
folder); MLflow writes to ``MLFLOW_TRACKING_URI``, else into the run folder (:func:`local_mlflow_uri`).
``trainer.project_name`` and ``trainer.experiment_name`` name the project and the run.
"""

from __future__ import annotations

import importlib.util
import math
import os
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rewardhub.config.fields import invalid

__all__ = ["LOGGERS", "Trackers", "logger_names"]

#: what each name needs: (module, pip package) or None when the run writes it anyway
LOGGERS: dict[str, tuple[str, str] | None] = {
    "console": None, "tensorboard": None, "file": None,
    "wandb": ("wandb", "wandb"), "mlflow": ("mlflow", "mlflow"),
}


def logger_names(value: Any) -> list[str]:
    """``trainer.logger`` as a list of names, checked: unknown names and missing packages are errors
    (in the one wording of :mod:`rewardhub.config.fields`)."""
    if value is None:
        return []
    names = [value] if isinstance(value, str) else list(value) if isinstance(value, Sequence) else None
    if names is None or not all(isinstance(n, str) for n in names):
        raise invalid(
            "trainer.logger", value, "expected a list of names, e.g. trainer.logger=[console,wandb]"
        )
    for i, name in enumerate(names):
        key = "trainer.logger" if isinstance(value, str) else f"trainer.logger[{i}]"
        if name not in LOGGERS:
            raise invalid(key, name, f"allowed: {', '.join(LOGGERS)}")
        need = LOGGERS[name]
        if need is not None and importlib.util.find_spec(need[0]) is None:
            raise invalid(key, name, f"pip install {need[1]} (or leave {name} out of trainer.logger)",
                          f"{name} is not installed")
    return names


def local_mlflow_uri(out: Path) -> str:
    """``sqlite:///<out>/mlflow.db`` when SQLAlchemy is there, else the folder ``<out>/mlruns`` (MLflow's
    file store, which MLflow 3 allows only with ``MLFLOW_ALLOW_FILE_STORE=true``: set here unless set)."""
    if importlib.util.find_spec("sqlalchemy") is not None:
        return f"sqlite:///{(out / 'mlflow.db').resolve()}"
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    return (out / "mlruns").resolve().as_uri()


class Trackers:
    """The run's wandb / mlflow trackers (none: every call does nothing)."""

    def __init__(self, names: Sequence[str], out: Path, *, project: str = "", experiment: str = "",
                 config: Mapping[str, Any] | None = None) -> None:
        self.wandb: Any = None
        self.mlflow: Any = None
        name = experiment or out.name
        if "wandb" in names:
            import wandb

            self.wandb = wandb.init(project=project or "rewardhub", name=name, dir=str(out),
                                    config=dict(config or {}), reinit="finish_previous")
        if "mlflow" in names:
            import mlflow

            if not os.environ.get("MLFLOW_TRACKING_URI"):
                mlflow.set_tracking_uri(local_mlflow_uri(out))
            mlflow.set_experiment(project or "rewardhub")
            mlflow.start_run(run_name=name)
            self.mlflow = mlflow

    def log(self, step: int, metrics: Mapping[str, Any], _run: Any = None) -> None:
        """A step's (or an evaluation's) numbers; the signature of a :class:`Run` callback."""
        numbers = {k: float(v) for k, v in metrics.items() if k != "step" and isinstance(v, (int, float))
                   and not isinstance(v, bool) and math.isfinite(v)}
        if self.wandb is not None:
            self.wandb.log(numbers, step=step)
        if self.mlflow is not None:
            self.mlflow.log_metrics(numbers, step=step)

    def close(self) -> None:
        if self.wandb is not None:
            self.wandb.finish()
            self.wandb = None
        if self.mlflow is not None:
            self.mlflow.end_run()
            self.mlflow = None
