"""The worker's side of reward files: write the shipped bytes, check every hash, point the config at them.

A shipped file is written content-addressed (``<cache>/<sha256[:16]>/<original name>``), so its
stem and hash, and therefore its module name ``_rewardhub_files.<stem>_<sha16>``, are the
driver's; the copy is re-hashed before it is used.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import tempfile
from collections.abc import Sequence
from typing import Any

from .._targets import file_sha256
from ..config.schema import RewardConfig
from ..config.schema import TermConfig
from ._setup import ShippedFile

__all__ = ["files_dir", "place_files"]


def files_dir() -> str:
    """Where this node keeps shipped reward files (``REWARDHUB_WORKER_FILES`` overrides it)."""
    base = os.environ.get("REWARDHUB_WORKER_FILES")
    if base:
        return base
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return os.path.join(tempfile.gettempdir(), f"rewardhub-files-{uid}")


def _write(f: ShippedFile) -> str:
    assert f.data is not None
    folder = os.path.join(files_dir(), f.sha256[:16])
    dest = os.path.join(folder, os.path.basename(f.path))
    if os.path.isfile(dest) and file_sha256(dest) == f.sha256:
        return dest
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".incoming-")
    with os.fdopen(fd, "wb") as out:
        out.write(f.data)
    os.replace(tmp, dest)
    return dest


def place_files(files: Sequence[ShippedFile], reward_cfg: RewardConfig
                ) -> tuple[RewardConfig, list[dict[str, Any]], dict[str, str]]:
    """Give every file term of ``reward_cfg`` a local, hash-checked file.

    A shipped file is written to :func:`files_dir`; a file that was not shipped must exist here at
    the driver's path with the driver's hash.

    :returns: the config with local paths (a term whose file failed is left out, so the rest can
        still be checked), the problems (dicts as in :func:`diff_items`, plus ``detail``), and
        reward name -> ``"shipped <path>"`` / ``"local <path>"``.
    """
    by_path = {f.path: f for f in files}
    problems: list[dict[str, Any]] = []
    info: dict[str, str] = {}
    keep = []
    for term in reward_cfg.rewards:
        f = by_path.get(os.path.abspath(os.path.expanduser(term.path))) if term.path else None
        placed = _place(f, term, info) if f is not None else term
        if isinstance(placed, TermConfig):
            keep.append(placed)
        else:
            problems.append({"reward": f.reward, "driver": f"sha256:{f.sha256}", "fatal": True,  # type: ignore[union-attr]
                             **placed})
    return dataclasses.replace(reward_cfg, rewards=tuple(keep)), problems, info


def _place(f: ShippedFile, term: TermConfig, info: dict[str, str]) -> TermConfig | dict[str, Any]:
    """``term`` pointed at a good local copy of ``f``, or the problem."""
    if f.data is not None:
        sent = hashlib.sha256(f.data).hexdigest()
        if sent != f.sha256:
            return {"kind": "file_hash", "worker": f"sha256:{sent}",
                    "detail": "the shipped bytes were corrupted in transit"}
        local = _write(f)
        got = file_sha256(local)
        if got != f.sha256:
            return {"kind": "file_hash", "worker": f"sha256:{got}", "detail": f"copy written to {local}"}
        info[f.reward] = f"shipped {local}"
        return dataclasses.replace(term, path=local)
    if not os.path.isfile(f.path):
        return {"kind": "file_missing", "worker": None, "detail": f.path}
    got = file_sha256(f.path)
    if got != f.sha256:
        return {"kind": "file_hash", "worker": f"sha256:{got}", "detail": f"node's copy at {f.path}"}
    info[f.reward] = f"local {f.path}"
    return term
