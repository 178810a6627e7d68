"""Turning a spec's target (``module:attr`` or ``file.py:attr``) into a live object."""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import sys
import threading
from typing import Any
from typing import Protocol

__all__ = ["file_module_name", "file_sha256", "load_target", "split_target"]

#: package-like prefix of the modules made from reward files
FILE_MODULE_PREFIX = "_rewardhub_files"
_lock = threading.RLock()
#: module name -> file path, for the finder below
_name2file: dict[str, str] = {}


class Hasher(Protocol):
    """What :func:`sha256` returns (the part of ``hashlib``'s hash objects used here)."""

    def update(self, data: bytes, /) -> None: ...

    def hexdigest(self) -> str: ...


def sha256(data: bytes = b"") -> Hasher:
    """A sha256 hasher: CPython's own built-in one where there is one (``hashlib`` would load
    OpenSSL's, ~5 ms of every ``rewardhub list``); the digests are the same."""
    for name in ("_sha256", "_sha2", "hashlib"):  # CPython <= 3.11, >= 3.12, elsewhere
        try:
            hasher: Hasher = importlib.import_module(name).sha256(data)
        except (ImportError, AttributeError):
            continue
        return hasher
    raise ImportError("no sha256 implementation")


def file_sha256(path: str) -> str:
    """Hex sha256 of a file's bytes."""
    h = sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 16), b""):
            h.update(chunk)
    return h.hexdigest()


def file_module_name(path: str, sha256: str | None = None) -> str:
    """The module name a reward file is imported under.

    It depends on the file's stem and content hash only, so every process (on every node) that
    loads the same file contents uses the same name, and functions pickled by reference resolve.
    """
    sha = sha256 or file_sha256(path)
    stem = re.sub(r"\W", "_", os.path.splitext(os.path.basename(path))[0]) or "reward"
    return f"{FILE_MODULE_PREFIX}.{stem}_{sha[:16]}"


def split_target(target: str) -> tuple[str, str]:
    """Split ``"mod.sub:attr"`` or ``"/path/f.py:attr"`` (a Windows drive colon is kept)."""
    module, sep, attr = target.rpartition(":")
    if not sep or not module or not attr:
        raise ValueError(f"target {target!r} is not 'module:attribute' or 'file.py:attribute'")
    return module, attr


class _FileFinder:
    """Finds ``_rewardhub_files.*`` modules again (e.g. when unpickling in a worker).

    A meta path finder needs only ``find_spec``; not subclassing ``importlib.abc.MetaPathFinder``
    spares every ``import rewardhub`` the import of ``importlib.abc`` (and of importlib.resources,
    tempfile, random and shutil behind it)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname == FILE_MODULE_PREFIX:
            spec = importlib.util.spec_from_loader(fullname, loader=None, is_package=True)
            if spec is not None:
                spec.submodule_search_locations = []
            return spec
        file = _name2file.get(fullname)
        if file is None:
            return None
        return importlib.util.spec_from_file_location(fullname, file)


_finder = _FileFinder()


def import_file(path: str, sha256: str | None = None) -> Any:
    """Import a Python file under its deterministic module name (once per process)."""
    path = os.path.abspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"reward file {path!r} does not exist")
    name = file_module_name(path, sha256)
    with _lock:
        if name in sys.modules:
            return sys.modules[name]
        if _finder not in sys.meta_path:
            sys.meta_path.append(_finder)
        _name2file[name] = path
        importlib.import_module(FILE_MODULE_PREFIX)
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import reward file {path!r}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(name, None)
            raise
        return module


def load_target(target: str, sha256: str | None = None) -> Any:
    """Import and return the object a target names (dotted attributes allowed)."""
    module_part, attr = split_target(target)
    is_file = module_part.endswith(".py") or os.sep in module_part or "/" in module_part
    module = import_file(module_part, sha256) if is_file else importlib.import_module(module_part)
    obj: Any = module
    for piece in attr.split("."):
        try:
            obj = getattr(obj, piece)
        except AttributeError:
            raise AttributeError(f"{module_part!r} has no attribute {attr!r}") from None
    return obj
