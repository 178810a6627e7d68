"""What the `reward.remote` client's test modules share: samples that log their calls, a scorer's retries."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rewardhub.execution.remote import RemoteScorer


def _samples(n: int, log: Path, gate: Path | None = None, first: int = 0) -> list[dict[str, Any]]:
    info: dict[str, Any] = {"log": str(log), **({"gate": str(gate)} if gate else {})}
    return [{"prompt": "p", "response": f"r{first + i}" + "x" * (i % 5), "ground_truth": None,
             "data_source": None, "extra_info": info} for i in range(n)]


def _retries(scorer: RemoteScorer) -> int:
    return int(getattr(getattr(scorer, "http", None), "retries", 0))
