"""Entry-point scanning and import-free module lookup (what a source declares: :mod:`._source_facts`)."""

from __future__ import annotations

import functools
import importlib
import importlib.machinery
import importlib.util
import json
import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING
from typing import Any

from ._targets import sha256

if TYPE_CHECKING:
    import importlib.metadata

__all__ = ["GRADER_GROUP", "PLUGIN_GROUP", "REWARD_GROUP", "EntryPointInfo", "cache_file", "cache_keep",
           "scan_entry_points", "find_module_file", "write_cache"]

#: entry-point group of pluggy plugin modules
PLUGIN_GROUP = "rewardhub"
#: entry-point group of single reward functions
REWARD_GROUP = "rewardhub.rewards"
#: entry-point group of extra CLI subcommands
COMMAND_GROUP = "rewardhub.commands"
#: entry-point group of tasks (a dataset and its reward terms: :mod:`rewardhub.tasks`)
TASK_GROUP = "rewardhub.tasks"
#: OpenAI RFT grader files shipped by a package: ``name = "package.module:stem"`` is the file ``stem.json``
#: next to that module (see :mod:`rewardhub.graders`)
GRADER_GROUP = "rewardhub.graders"
ALL_GROUPS = (PLUGIN_GROUP, REWARD_GROUP, COMMAND_GROUP, TASK_GROUP, GRADER_GROUP)


def _distributions_patched() -> bool:
    """Whether ``importlib.metadata.distributions`` is not the standard library's own (a test
    monkeypatched it). ``importlib.metadata`` is imported only when the entry points are scanned
    (it pulls in the email package: a tenth of ``rewardhub list``'s start-up); not imported yet,
    it cannot have been patched."""
    md = sys.modules.get("importlib.metadata")
    if md is None:
        return False
    fn = md.distributions
    return (
        getattr(fn, "__module__", None) != "importlib.metadata"
        or getattr(fn, "__qualname__", None) != "distributions"
    )


@dataclass(frozen=True)
class EntryPointInfo:
    """One entry point, with the distribution that declared it."""

    group: str
    name: str
    value: str
    dist: str | None
    version: str | None
    entry_point: Any

    @property
    def module(self) -> str:
        return self.value.partition(":")[0].strip()

    @property
    def attr(self) -> str:
        return self.value.partition(":")[2].strip()

    def load(self) -> Any:
        ep = self.entry_point
        if ep is not None:
            return ep.load()
        # what importlib.metadata.EntryPoint.load does (``module:attr.attr [extras]``), without
        # importing importlib.metadata (see _distributions_patched)
        obj: Any = importlib.import_module(self.module)
        for part in filter(None, self.attr.partition("[")[0].strip().split(".")):
            obj = getattr(obj, part)
        return obj


def _dist_name(dist: importlib.metadata.Distribution) -> str | None:
    try:
        return dist.metadata["Name"]
    except Exception:  # a dist-info without METADATA
        return None


#: how many entry-point cache files (one per environment: interpreter and sys.path) are kept
CACHE_KEEP = 8


def cache_keep() -> int:
    """``REWARDHUB_CACHE_KEEP`` (default :data:`CACHE_KEEP`): the most recently used files kept."""
    try:
        return max(1, int(os.environ.get("REWARDHUB_CACHE_KEEP") or CACHE_KEEP))
    except ValueError:
        return CACHE_KEEP


def write_cache(path: str, data: Any, kind: str) -> None:
    """Write the cache file ``path`` of ``kind`` (see :func:`cache_file`) whole (a reader sees the old
    file or the new one), then delete all but the :func:`cache_keep` most recently used of its kind."""
    folder = os.path.dirname(path)
    try:
        os.makedirs(folder, exist_ok=True)
        tmp = f"{path}.{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f)
        os.replace(tmp, path)
    except OSError:  # a read-only home: found again next time
        pass
    try:
        names = [n for n in os.listdir(folder) if n.startswith(f"{kind}-") and n.endswith(".json")]
        files = sorted((os.path.join(folder, n) for n in names), key=os.path.getmtime, reverse=True)
        for old in files[cache_keep():]:
            os.remove(old)
    except OSError:  # another process pruned first, or the folder is not ours to clean
        pass


def cache_file(kind: str) -> str | None:
    """This environment's (interpreter and ``sys.path``) cache file of ``kind``, in
    ``$XDG_CACHE_HOME/rewardhub`` (else ``~/.cache/rewardhub``); ``None`` under ``REWARDHUB_NO_CACHE``."""
    if os.environ.get("REWARDHUB_NO_CACHE"):
        return None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "rewardhub", f"{kind}-{_env_key(sys.executable, tuple(sys.path))}.json")


@functools.lru_cache(maxsize=8)
def _env_key(executable: str, path: tuple[str, ...]) -> str:
    # the groups are part of the key: a cache written before a group existed does not hold its entries
    return sha256("\0".join([executable, *path, *ALL_GROUPS]).encode()).hexdigest()[:20]


def _cache_file() -> str | None:
    return cache_file("entry-points")


#: what ``importlib.metadata`` finds a distribution by, in a ``sys.path`` folder
_DIST_SUFFIXES = (".dist-info", ".egg-info", ".egg")


def _holds_dists(folder: str) -> bool:
    """Whether ``folder`` has any distribution's metadata in it (``True`` where it cannot be read)."""
    try:
        with os.scandir(folder or ".") as entries:
            return any(e.name.endswith(_DIST_SUFFIXES) for e in entries)
    except OSError:
        return os.path.exists(folder or ".")


def _path_state() -> list[list[Any]]:
    """(entry, mtime_ns) of every sys.path folder: installing or removing a dist changes one."""
    state = []
    for entry in sys.path:
        try:
            state.append([entry, os.stat(entry or ".").st_mtime_ns])
        except OSError:
            state.append([entry, None])
    return state


def _with_dists(state: list[list[Any]]) -> list[list[Any]]:
    """``state`` as cached: each folder also says whether it holds any distribution."""
    return [[entry, mtime, mtime is not None and _holds_dists(entry)] for entry, mtime in state]


def _still_valid(cached: Any, state: list[list[Any]]) -> bool:
    """Whether a cache made at ``cached`` (see :func:`_with_dists`) still holds for ``state``.

    A folder whose modification time changed counts only if it holds distributions, then or now:
    the current directory is on ``sys.path`` under ``python -m``, and a command that writes its
    output there (``rewardhub score ... -o out.jsonl``) changes it on every run without installing
    anything.
    """
    if not isinstance(cached, list) or len(cached) != len(state):
        return False
    for old, (entry, mtime) in zip(cached, state):
        if not isinstance(old, list) or len(old) != 3 or old[0] != entry:
            return False
        if old[1] == mtime:
            continue
        if old[2] or old[1] is None or mtime is None or _holds_dists(entry):
            return False
    return True


def scan_entry_points(groups: tuple[str, ...] = (PLUGIN_GROUP, REWARD_GROUP, GRADER_GROUP)
                      ) -> list[EntryPointInfo]:
    """Read the entry points of every installed distribution once, without importing them.

    A distribution found twice on ``sys.path`` counts once (the first, as the import system
    would use it). The scan is cached on disk, keyed by ``sys.path`` and the modification times
    of its folders (``REWARDHUB_NO_CACHE=1`` turns the cache off); one file per environment, the
    ``REWARDHUB_CACHE_KEEP`` (default 8) most recently used kept. A monkeypatched
    ``importlib.metadata.distributions`` (as tests do) is always honoured.
    """
    patched = _distributions_patched()
    path = None if patched else _cache_file()
    state = _path_state() if path else []
    if path:
        cached: Any = _NO_FILE
        try:
            with open(path, encoding="utf-8") as f:
                cached = json.load(f)
        except FileNotFoundError:
            pass
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            _cache_warning(path, f"{type(exc).__name__}: {exc}")
        if cached is not _NO_FILE:
            eps = _cached_eps(cached)
            if eps is None:
                _cache_warning(path, "not the shape this rewardhub writes")
            elif _still_valid(cached.get("state"), state):
                try:
                    os.utime(path)  # most recently used: the last to be pruned
                except OSError:
                    pass
                return [EntryPointInfo(g, n, v, d, ver, None) for g, n, v, d, ver in eps if g in groups]
    found = _scan(ALL_GROUPS if path else groups)
    if path:
        eps = [[e.group, e.name, e.value, e.dist, e.version] for e in found]
        write_cache(path, {"state": _with_dists(state), "eps": eps}, "entry-points")
    return [e for e in found if e.group in groups]


_NO_FILE = object()


def _cached_eps(cached: Any) -> list[list[Any]] | None:
    """The entry points of a cache file's content, or ``None`` when it is not what :func:`scan_entry_points`
    writes (``{"state": [...], "eps": [[group, name, value, dist|null, version|null], ...]}``)."""
    if (
        not isinstance(cached, dict)
        or not isinstance(cached.get("state"), list)
        or not isinstance(cached.get("eps"), list)
    ):
        return None
    eps: list[list[Any]] = cached["eps"]
    for ep in eps:
        if not (isinstance(ep, list) and len(ep) == 5 and all(isinstance(x, str) for x in ep[:3])
                and all(x is None or isinstance(x, str) for x in ep[3:])):
            return None
    return eps


def _cache_warning(path: str, why: str) -> None:
    """One line on stderr: the cache file is ignored (and rewritten by this scan)."""
    try:
        sys.stderr.write(f"WARNING: the entry-point cache {path} cannot be used ({why}); the installed "
                         "distributions are scanned again and the file rewritten\n")
    except (OSError, ValueError, AttributeError):
        pass


def _scan(groups: tuple[str, ...]) -> list[EntryPointInfo]:
    import importlib.metadata

    seen: set[str] = set()
    found: list[EntryPointInfo] = []
    for dist in importlib.metadata.distributions():
        name = _dist_name(dist)
        key = (name or "").lower().replace("_", "-")
        if key and key in seen:
            continue
        if key:
            seen.add(key)
        try:
            eps = dist.entry_points
        except Exception:
            continue
        for ep in eps:
            if ep.group in groups:
                found.append(
                    EntryPointInfo(ep.group, ep.name, ep.value, name, dist.version if name else None, ep)
                )
    found.sort(key=lambda e: (e.group, e.name, e.dist or ""))
    return found


def find_module_file(module: str) -> str | None:
    """Locate a module's source file without executing it (or any parent package).

    :returns: the file path, ``""`` for a namespace package or a module with no file, or ``None``
        when the module cannot be found.
    """
    if module in sys.modules:
        return getattr(sys.modules[module], "__file__", "") or ""
    parts = module.split(".")
    path: list[str] | None = None
    spec = None
    for i, part in enumerate(parts):
        search = path if path is not None else sys.path
        try:
            spec = importlib.machinery.PathFinder.find_spec(part, search)
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            if i == 0:
                try:  # a builtin or frozen top-level module
                    spec = importlib.util.find_spec(part)
                except (ImportError, ValueError):
                    spec = None
            if spec is None:
                return None
        path = list(spec.submodule_search_locations or [])
        if i < len(parts) - 1 and not path:
            return None
    assert spec is not None
    origin = spec.origin
    return origin if origin and os.path.exists(origin) else ""
