"""The optional dependencies and the extra that installs each: one error, the same everywhere, when
one is needed and missing (``rewardhub data -o x.parquet`` without pyarrow, ``doctor`` without Ray)."""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

from .errors import UsageError

__all__ = ["EXTRAS", "require"]

#: importable module -> the rewardhub extra that installs it (``None``: no extra; pip install it)
EXTRAS: dict[str, str | None] = {"pyarrow": "data", "ray": "ray", "aiohttp": "serve", "datasets": None}


def require(module: str, what: str, hint: str = "") -> ModuleType:
    """``import module``, or a :class:`~rewardhub.errors.UsageError` saying that ``what`` needs it and
    how to install it here (the extra that carries it); ``hint``: another way on, a line of its own.

    Example: ``require("pyarrow", "-o x.parquet: writing parquet")``.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        top = module.partition(".")[0]
        extra = EXTRAS.get(top)
        package = f"'rewardhub[{extra}]'" if extra else top
        missing = isinstance(exc, ModuleNotFoundError) and (exc.name or top).partition(".")[0] == top
        why = "which is not installed here" if missing else f"which cannot be imported here ({exc})"
        raise UsageError(f"{what} needs {top}, {why}\ninstall it: {sys.executable} -m pip install {package}"
                         + (f"\n{hint}" if hint else "")) from None
