"""What a reward's source says about a top-level function without running it: its docstring, its
parameters and the reward metadata it declares, read with ``ast``.

``rewardhub list`` asks this of every lazy entry point, and parsing their files was a tenth of its run:
the answers are kept on disk, one small file per environment beside its entry-point cache (kept and pruned
alike; ``REWARDHUB_NO_CACHE=1`` turns both off), each source file's answers under its modification time
and size (what Python checks a ``.pyc`` by): a file that changed is parsed again.
"""

from __future__ import annotations

import ast
import atexit
import functools
import json
import os
import threading
from typing import Any

from ._discovery import cache_file
from ._discovery import write_cache

__all__ = ["UNREADABLE", "static_docstring", "static_meta", "static_params"]

#: no reward metadata can be read from the source without running it
UNREADABLE = "unreadable"

#: the most source files whose answers an environment's cache file keeps (the first added go first)
KEEP_FILES = 512


@functools.lru_cache(maxsize=32)
def _parsed_at(module_file: str, mtime_ns: int) -> ast.Module | None:
    try:
        with open(module_file, encoding="utf-8") as f:
            return ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return None


def _docstring(tree: ast.Module | None, attr: str) -> str:
    for node in tree.body if tree else ():
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == attr:
            doc = ast.get_docstring(node) or ""
            return doc.strip().splitlines()[0].strip() if doc.strip() else ""
    return ""


def _params(tree: ast.Module | None, attr: str) -> set[str] | None:
    for node in tree.body if tree else ():
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == attr:
            a = node.args
            return {p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)}
    return None


def _meta(tree: ast.Module | None, attr: str) -> Any:
    found: Any = None
    for node in tree.body if tree else ():
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == attr:
            for deco in node.decorator_list:
                func = deco.func if isinstance(deco, ast.Call) else deco
                if (func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)) != "reward":
                    continue
                if not isinstance(deco, ast.Call):
                    found = {}
                    continue
                try:
                    found = {kw.arg: ast.literal_eval(kw.value) for kw in deco.keywords if kw.arg}
                except ValueError:
                    found = UNREADABLE
                if deco.args or any(kw.arg is None for kw in deco.keywords):
                    found = UNREADABLE
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Attribute) and t.attr == "__rewardhub__"
                   and isinstance(t.value, ast.Name) and t.value.id == attr for t in targets):
                try:
                    found = ast.literal_eval(node.value) if node.value is not None else UNREADABLE
                except ValueError:
                    found = UNREADABLE
    return found


def static_docstring(module_file: str, attr: str) -> str:
    """First docstring line of top-level function/class ``attr`` in a source file, read with ``ast``."""
    return _facts(module_file, attr)[0]


def static_params(module_file: str, attr: str) -> set[str] | None:
    """The parameter names of top-level function ``attr`` of a source file, read with ``ast``
    (``None`` when it is not such a function)."""
    params = _facts(module_file, attr)[1]
    return None if params is None else set(params)


def static_meta(module_file: str, attr: str) -> Any:
    """The reward metadata that top-level ``attr`` of a source file declares, read with ``ast``:

    - ``attr.__rewardhub__ = {...}`` (a plain dict, what a package without rewardhub writes), or
    - ``@rewardhub.reward(...)`` / ``@reward(...)`` keyword arguments on ``def attr``.

    :returns: what is declared (a dict of keys and values, for a valid declaration), ``None`` when
        nothing is, or :data:`UNREADABLE` when a declaration is not made of literals (only an import
        can tell).
    """
    return _facts(module_file, attr)[2]


# ---- the cache ------------------------------------------------------------------------------------

#: (cache file, its entries) as this process read and added to them; read once, written once (at exit)
_memo: tuple[str, dict[str, Any]] | None = None
_dirty = False  # entries were added since the file was read or written
_WRITING = threading.RLock()


def _cache_path() -> str | None:
    return cache_file("source-facts")


def _facts(module_file: str, attr: str) -> tuple[str, frozenset[str] | None, Any]:
    """``attr``'s (docstring line, parameters, metadata) in ``module_file``: from the cache while the
    file is unchanged, else parsed (and remembered)."""
    if not module_file or not module_file.endswith(".py"):
        return "", None, None
    try:
        st = os.stat(module_file)
    except OSError:
        return "", None, None
    stamp = [st.st_mtime_ns, st.st_size]
    path = _cache_path()
    files = _read(path) if path else {}
    entry: Any = files.get(module_file)
    valid = _valid_entry(entry) and entry["stamp"] == stamp  # else: parsed again
    held = entry["attrs"].get(attr) if valid else None
    if held is not None:  # its metadata is stored as its repr, checked to read back as itself
        try:
            return held[0], None if held[1] is None else frozenset(held[1]), ast.literal_eval(held[2])
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            pass
    tree = _parsed_at(module_file, st.st_mtime_ns)
    params = _params(tree, attr)
    doc, meta = _docstring(tree, attr), _meta(tree, attr)
    if path and _round_trips(repr(meta)):  # not one whose repr is no literal (a nan): parsed each time
        answers = [doc, None if params is None else sorted(params), repr(meta)]
        _remember(files, module_file, stamp, attr, answers)
    return doc, None if params is None else frozenset(params), meta


def _round_trips(text: str) -> bool:
    try:
        return repr(ast.literal_eval(text)) == text
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False


def _read(path: str) -> dict[str, Any]:
    """The cache file's entries (each checked by :func:`_valid_entry` when used)."""
    global _memo
    memo = _memo
    if memo is None or memo[0] != path:
        with _WRITING:  # read once, by one thread: every thread then adds to the same entries
            if _memo is None or _memo[0] != path:
                flush()  # what was learned for another environment (its sys.path changed)
                try:
                    with open(path, encoding="utf-8") as f:
                        raw = json.load(f)
                    os.utime(path)  # most recently used: the last to be pruned
                except (OSError, ValueError, UnicodeDecodeError):
                    raw = {}
                _memo = (path, raw if isinstance(raw, dict) else {})
            memo = _memo
    return memo[1]


def _valid_entry(entry: Any) -> bool:
    if not (isinstance(entry, dict) and isinstance(entry.get("attrs"), dict)):
        return False
    stamp = entry.get("stamp")
    if not (isinstance(stamp, list) and len(stamp) == 2 and all(type(x) is int for x in stamp)):
        return False
    return all(
        isinstance(v, list) and len(v) == 3 and isinstance(v[0], str) and isinstance(v[2], str)
        and (v[1] is None or (isinstance(v[1], list) and all(isinstance(p, str) for p in v[1])))
        for v in entry["attrs"].values()
    )


def _remember(files: dict[str, Any], module_file: str, stamp: list[int], attr: str,
              answers: list[Any]) -> None:
    global _dirty
    with _WRITING:  # an entry is replaced, never changed, as other threads may read it
        old = files.pop(module_file, None)
        keep = old["attrs"] if old is not None and _valid_entry(old) and old["stamp"] == stamp else {}
        files[module_file] = {"stamp": stamp, "attrs": {**keep, attr: answers}}  # the most recent last
        while len(files) > KEEP_FILES:
            files.pop(next(iter(files)))
        _dirty = True


@atexit.register
def flush() -> None:
    """Write the answers this process added to its cache file: once, at exit (a cold cache is not
    rewritten per answer)."""
    global _dirty
    with _WRITING:
        if _memo is None or not _dirty:
            return
        _dirty = False
        write_cache(*_memo, "source-facts")
