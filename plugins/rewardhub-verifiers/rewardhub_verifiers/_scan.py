"""Finding the installed verifiers environments and their ``@vf.reward`` methods without importing them.

A distribution is a candidate when its METADATA requires ``verifiers``, or (verifiers' own
environments, ``reverse_text``, ``gsm8k``, declare only ``datasets``) when one of its few, small
modules imports ``verifiers``. Its files come from its RECORD (sizes included, so a large data module
is never opened), its modules from ``top_level.txt`` or the RECORD, and only names that are plain
module names count: ``/usr`` or ``../x`` in a ``top_level.txt`` walks nothing. An environment whose
source cannot be read, or that has no reward to list, is returned with its ``error``.
"""

from __future__ import annotations

import ast
import csv
import os
import re
import sys
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path

__all__ = ["MAX_SOURCE_BYTES", "Environment", "scan"]

_REQUIRES = re.compile(r"^Requires-Dist:\s*verifiers\b(?!-)", re.IGNORECASE | re.MULTILINE)
_IMPORTS = re.compile(rb"^[ \t]*(?:import|from)[ \t]+verifiers\b", re.MULTILINE)
_MODULE = re.compile(r"^[A-Za-z_]\w*$")
#: a module file larger than this is not read (an environment's data, not its reward code)
MAX_SOURCE_BYTES = 1 << 20
#: a distribution whose RECORD is larger, or whose package has more modules, is not read for ``import
#: verifiers`` (verifiers' own environments have two or three)
_SNIFF_RECORD_BYTES = 64 << 10
_SNIFF_FILES = 16
_SNIFF_HEAD = 16 << 10  # imports are at the top of a module


@dataclass
class Environment:
    """An installed verifiers environment: its distribution, version, module and rewards (name -> rubric
    weight, ``None`` where the weight is not a literal); ``error`` where it cannot be listed (a module
    that cannot be parsed, no reward found); ``notes`` on what was not read."""

    dist: str
    version: str
    module: str
    rewards: dict[str, float | None] = field(default_factory=dict)
    error: str = ""
    notes: list[str] = field(default_factory=list)


def _dist_infos() -> list[Path]:
    found: dict[str, Path] = {}
    for entry in sys.path:
        try:
            names = sorted(os.listdir(entry or "."))
        except OSError:
            continue
        for name in names:
            if name.endswith(".dist-info"):
                key = name.split("-")[0].lower().replace(".", "_")
                found.setdefault(key, Path(entry or ".") / name)  # the first on sys.path wins
    return list(found.values())


def _headers(path: Path) -> str:
    """A METADATA file's headers (what comes before its first empty line: not the long description)."""
    lines = []
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.strip():
                    break
                lines.append(line)
    except OSError:
        pass
    return "".join(lines)


def _read_small(path: Path, limit: int) -> str | None:
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            return f.read(limit)
    except OSError:
        return None


#: (path parts, size) of each file a RECORD lists inside the folder that holds the dist-info
_Record = list[tuple[list[str], int | None]]


def _record(info: Path, limit: int | None) -> _Record | None:
    """What the RECORD lists (``None``: no RECORD, or one over ``limit`` bytes). A path that leaves the
    folder (absolute, or with ``..``: scripts, headers) is left out."""
    path = info / "RECORD"
    try:
        if limit is not None and path.stat().st_size > limit:
            return None
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    out: _Record = []
    for line in text.splitlines():
        row = next(csv.reader([line])) if line.startswith('"') else line.rsplit(",", 2)
        if not row or not row[0]:
            continue
        rel = row[0].replace("\\", "/")
        parts = rel.split("/")
        if rel.startswith("/") or ".." in parts or ":" in parts[0]:
            continue
        size = row[2] if len(row) > 2 else ""
        out.append((parts, int(size) if size.isdigit() else None))
    return out


def _modules(info: Path, dist: str, record: _Record | None) -> tuple[list[str], list[str]]:
    """The distribution's top-level module names, and a note on each ``top_level.txt`` line ignored."""
    notes: list[str] = []
    listed = (_read_small(info / "top_level.txt", 64 << 10) or "").split()
    names = []
    for name in listed:
        if _MODULE.match(name):
            names.append(name)
        else:
            notes.append(f"top_level.txt names {name!r}, which is not a module name: not read")
    if names:
        return names, notes
    for parts, _ in record or ():
        first = parts[0]
        module = first[:-3] if first.endswith(".py") else first
        if module not in names and (first.endswith(".py") or len(parts) > 1) and first != "__pycache__" \
                and _MODULE.match(module):
            names.append(module)
    return names or [dist.replace("-", "_").replace(".", "_").lower()], notes


def _py_files(info: Path, module: str, record: _Record | None) -> list[tuple[Path, int]]:
    """The module's ``.py`` files with their sizes (from the RECORD where there is one, else a bounded walk
    of the package folder beside the dist-info, symbolic links not followed)."""
    base = info.parent
    if record is not None:
        out = []
        for parts, size in record:
            if parts[-1].endswith(".py") and parts[0] in (module, f"{module}.py"):
                path = base.joinpath(*parts)
                if size is None:
                    try:
                        size = path.stat().st_size
                    except OSError:
                        continue
                out.append((path, size))
        if out:
            return out
    single = base / f"{module}.py"
    if single.is_file():
        return [(single, single.stat().st_size)]
    root = base / module
    found: list[tuple[Path, int]] = []
    if root.is_dir() and not root.is_symlink():
        for folder, dirs, files in os.walk(root, followlinks=False):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for name in files:
                if name.endswith(".py") and len(found) < 1000:
                    path = Path(folder) / name
                    try:
                        found.append((path, path.stat().st_size))
                    except OSError:
                        pass
    return found


def _weight(decorator: ast.expr) -> tuple[bool, float | None]:
    """Whether ``decorator`` is ``@vf.reward`` / ``@reward(...)``, and the rubric weight it gives
    (``None``: a weight that is not a literal number)."""
    call = decorator if isinstance(decorator, ast.Call) else None
    func = call.func if call is not None else decorator
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name != "reward":
        return False, None
    for kw in call.keywords if call is not None else ():
        if kw.arg == "weight":
            try:
                value = ast.literal_eval(kw.value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                return True, None
            number = isinstance(value, int | float) and not isinstance(value, bool)
            return True, float(value) if number else None
    return True, 1.0


def _rewards_in(source: str, filename: str) -> dict[str, float | None]:
    tree = ast.parse(source, filename)
    rewards: dict[str, float | None] = {}
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for fn in cls.body:
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                for dec in fn.decorator_list:
                    is_reward, weight = _weight(dec)
                    if is_reward:
                        rewards[fn.name] = weight
    return rewards


def _imports_verifiers(files: list[tuple[Path, int]], base: Path, module: str) -> bool:
    """Whether one of the package's top modules (``m.py``, ``m/*.py``) imports verifiers (at the top: its
    first 16 KB)."""
    top = (base, base / module)
    for path, size in files[:_SNIFF_FILES]:
        if size > MAX_SOURCE_BYTES or path.parent not in top:
            continue
        try:
            with open(path, "rb") as f:
                head = f.read(_SNIFF_HEAD)
        except OSError:
            continue
        if b"verifiers" in head and _IMPORTS.search(head):
            return True
    return False


def _environment(info: Path) -> Environment | None:
    meta = _headers(info / "METADATA")
    dist = re.search(r"^Name:\s*(\S+)", meta, re.MULTILINE)
    version = re.search(r"^Version:\s*(\S+)", meta, re.MULTILINE)
    if dist is None or version is None or dist.group(1).lower().startswith("rewardhub") or \
            dist.group(1).lower() == "verifiers":
        return None
    declared = bool(_REQUIRES.search(meta))
    record = _record(info, None if declared else _SNIFF_RECORD_BYTES)
    if not declared and record is None:
        return None  # a large distribution, or one without a RECORD: not an environment that is sniffed
    modules, notes = _modules(info, dist.group(1), record)
    env = Environment(dist.group(1), version.group(1), modules[0], notes=notes)
    is_env = declared
    for module in modules:
        files = _py_files(info, module, record)
        if not declared:
            if len(files) > _SNIFF_FILES or not _imports_verifiers(files, info.parent, module):
                continue
            is_env = True
        env.module = module
        for path, size in files:
            if size > MAX_SOURCE_BYTES:
                env.notes.append(f"{path.name} ({size / 1e6:.1f} MB) is not read for rewards (over "
                                 f"{MAX_SOURCE_BYTES >> 20} MB: data, not reward code)")
                continue
            try:
                env.rewards.update(_rewards_in(path.read_text(encoding="utf-8", errors="replace"), str(path)))
            except (Exception, RecursionError, MemoryError) as exc:  # noqa: BLE001 - one environment
                env.error = f"{path.name} cannot be parsed: {type(exc).__name__}: {exc}"
                env.rewards = {}
                break
        if env.rewards or env.error:
            return env
    if is_env:
        env.error = "no @vf.reward method found in its own files"
        return env
    return None


def _cache_file() -> str | None:
    """Where the distributions found not to be environments are remembered (per interpreter and path)."""
    if os.environ.get("REWARDHUB_NO_CACHE"):
        return None
    import hashlib

    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    key = hashlib.sha256("\0".join([sys.executable, *sys.path]).encode()).hexdigest()[:20]
    return os.path.join(base, "rewardhub", f"verifiers-scan-{key}.json")


def _stamp(info: Path) -> list[int] | None:
    """What changes when a distribution is installed again: its RECORD's (or METADATA's) mtime and size."""
    for name in ("RECORD", "METADATA"):
        try:
            st = os.stat(info / name)
        except OSError:
            continue
        return [st.st_mtime_ns, st.st_size]
    return None


def _load(path: str | None) -> dict[str, list[int]]:
    import json

    if path is None:
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _save(path: str | None, data: dict[str, list[int]]) -> None:
    import json

    if path is None:
        return
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f)
        os.replace(tmp, path)
    except OSError:  # a read-only home: scanned again next time
        pass


def scan() -> list[Environment]:
    """Every installed verifiers environment (none where verifiers itself is not importable: then no
    environment could be scored); one that fails is returned with its error, never raised.

    A distribution found not to be an environment is remembered (by its RECORD's mtime and size, which
    installing it again changes) and not read again; environments are read every time."""
    import importlib.util

    if importlib.util.find_spec("verifiers") is None:
        return []
    cache = _cache_file()
    known = _load(cache)
    seen: dict[str, list[int]] = {}
    envs = []
    for info in _dist_infos():
        stamp = _stamp(info)
        if stamp is not None and known.get(str(info)) == stamp:
            seen[str(info)] = stamp
            continue
        try:
            env = _environment(info)
        except Exception as exc:  # noqa: BLE001 - one distribution must not hide the others
            env = Environment(info.name.split("-")[0], "?", info.name.split("-")[0].lower(),
                              error=f"{type(exc).__name__}: {exc}")
        if env is not None:
            envs.append(env)
        elif stamp is not None:
            seen[str(info)] = stamp
    if seen != known:
        _save(cache, seen)
    return envs
