"""Where a reward failed: the last frames of its own code, as text (it crosses processes and Ray).

:func:`error_text` (in :mod:`._outcome`) appends them to a failed call's message after :data:`MARK`;
a :class:`~rewardhub.execution.Column` keeps the two apart at once (``errors`` the message, as
before; ``where`` the frames), so rows and metrics read as they did and the frames go where an
author looks for them: ``score --summary-json``, ``rewardhub test``, and the terminal with
``--debug`` or ``REWARDHUB_DEBUG=1``.
"""

from __future__ import annotations

import os
import traceback

__all__ = ["MARK", "debug_enabled", "reward_frames", "split_error"]

#: between a failed call's message and its frames
MARK = "\n--- where the reward failed (most recent call last) ---\n"
#: frames of rewardhub's machinery (not of its built-in rewards) and of the stdlib's executors are left out
_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_BUILTIN = os.path.join(_HERE, "builtin") + os.sep
_LIBRARY_PARTS = (f"{os.sep}asyncio{os.sep}", f"{os.sep}concurrent{os.sep}futures{os.sep}",
                  f"{os.sep}threading.py", f"{os.sep}multiprocessing{os.sep}")


def _machinery(filename: str) -> bool:
    path = os.path.abspath(filename)
    if path.startswith(_HERE + os.sep) and not path.startswith(_BUILTIN):
        return True
    return any(part in path for part in _LIBRARY_PARTS)


def reward_frames(exc: BaseException, limit: int = 5) -> str:
    """The frames of ``exc``'s traceback outside rewardhub's machinery (at most ``limit``: the first,
    the reward's entry, and the last ones), a ``File "path", line N, in function`` line and its
    source line each ("" when there are none)."""
    try:
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if not _machinery(f.filename)]
    except Exception:  # a traceback that cannot be read must not hide the error itself
        return ""
    lines = []
    # the reward's own entry frame stays when a library it called adds many: the last ones, after it
    shown = frames if len(frames) <= limit else [frames[0], None, *frames[-(limit - 1):]]
    for f in shown:
        if f is None:
            lines.append(f"  ... ({len(frames) - limit} frames left out)")
            continue
        lines.append(f'  File "{f.filename}", line {f.lineno}, in {f.name}')
        if f.line:
            lines.append(f"    {f.line.strip()}")
    return "\n".join(lines)


def split_error(text: str) -> tuple[str, str | None]:
    """``(message, frames)`` of an error text (frames ``None`` when it carries none)."""
    message, mark, frames = text.partition(MARK)
    return (message, frames) if mark else (text, None)


def debug_enabled() -> bool:
    """``REWARDHUB_DEBUG`` is set to something other than ``""``/``0`` (``--debug`` sets it)."""
    return os.environ.get("REWARDHUB_DEBUG", "") not in ("", "0")
