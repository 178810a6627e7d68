"""Run outputs for people: a PNG of reward and throughput over steps, and TensorBoard event files.

TensorBoard files are written with ``torch.utils.tensorboard`` when the ``tensorboard`` package is
installed, and otherwise by :class:`MinimalEventWriter` (scalar summaries only, the same TFRecord
format, readable by TensorBoard).
"""

from __future__ import annotations

import json
import os
import socket
import struct
import time
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["MinimalEventWriter", "open_event_writer", "plot_metrics", "read_metrics"]


def _crc32c_table() -> list[int]:
    table = []
    for i in range(256):
        crc = i
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc = _TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _masked(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(n: int) -> bytes:
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field_bytes(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


class MinimalEventWriter:
    """Writes ``Event`` protos with scalar ``Summary`` values as TFRecords, without TensorFlow."""

    def __init__(self, logdir: str | os.PathLike[str]) -> None:
        os.makedirs(logdir, exist_ok=True)
        name = f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}.{os.getpid()}.rh"
        self._f = open(os.path.join(logdir, name), "ab")
        self._event(b"\x1a" + _varint(len(b"brain.Event:2")) + b"brain.Event:2", step=0)

    def _event(self, body: bytes, *, step: int) -> None:
        data = b"\x09" + struct.pack("<d", time.time()) + b"\x10" + _varint(step) + body
        header = struct.pack("<Q", len(data))
        self._f.write(header + struct.pack("<I", _masked(header)) + data
                      + struct.pack("<I", _masked(data)))

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        value_msg = _field_bytes(1, tag.encode()) + b"\x15" + struct.pack("<f", float(value))
        self._event(_field_bytes(5, _field_bytes(1, value_msg)), step=step)

    def flush(self) -> None:
        self._f.flush()

    def close(self) -> None:
        self._f.close()


def open_event_writer(logdir: str | os.PathLike[str]) -> Any:
    """``torch.utils.tensorboard.SummaryWriter`` if tensorboard is installed, else the minimal one."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        return MinimalEventWriter(logdir)
    return SummaryWriter(log_dir=str(logdir))


def read_metrics(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    p = Path(path)
    if not p.exists():
        return []
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]


def plot_metrics(rows: Sequence[Mapping[str, Any]], png: str | os.PathLike[str], title: str = "") -> str:
    """Reward and throughput over steps, one PNG with two panels; evaluations (``val/score``) as their own
    line."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    val = [r for r in rows if "val/score" in r]
    rows = [r for r in rows if "val/score" not in r]
    steps = [r["step"] for r in rows]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    ax1.plot(steps, [r.get("reward/mean", float("nan")) for r in rows], marker=".", label="reward/mean")
    terms = sorted({k for r in rows for k in r if k.startswith("rewards/") and k.endswith("/mean")})
    for key in terms[:4]:
        ax1.plot(steps, [r.get(key, float("nan")) for r in rows], alpha=0.6, label=key)
    if val:
        ax1.plot([r["step"] for r in val], [r["val/score"] for r in val], marker="o", linestyle="--",
                 color="black", label="val/score")
    ax2.plot(steps, [r.get("throughput/samples_per_s", float("nan")) for r in rows], marker=".",
             label="samples trained / s")
    ax2.set_xlabel("step")
    for ax, label in ((ax1, "reward"), (ax2, "throughput")):
        ax.set_ylabel(label)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(png, dpi=90)
    plt.close(fig)
    return str(png)
