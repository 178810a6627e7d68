"""What the `rewardhub migrate` / `rewardhub check` test modules share: the legacy examples, a launch
script read as a config."""

from __future__ import annotations

from pathlib import Path

from rewardhub.config.loader import read_config_file

SHARED = Path(__file__).resolve().parent / "data" / "legacy-examples"  # a copy of ../shared/legacy-examples


def example_files():
    return sorted(p for p in SHARED.glob("*") if p.suffix in (".yaml", ".overrides"))


def script_config(tmp_path, body: str) -> dict:
    path = tmp_path / "run.sh"
    path.write_text("#!/bin/bash\n" + body)
    return read_config_file(str(path))
