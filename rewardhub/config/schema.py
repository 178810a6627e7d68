"""The ``reward:`` section's schema (OmegaConf structured dataclasses) and its validation.

Validation errors are :class:`~rewardhub.errors.UsageError` naming the key, the bad value and
the allowed values; OmegaConf's own messages are never shown raw.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import Any
from typing import Dict
from typing import List
from typing import Optional

from ..errors import UsageError

__all__ = [
    "CHOICES",
    "PluginsConfig",
    "RewardConfig",
    "RewardModelConfig",
    "SandboxConfig",
    "TermConfig",
    "WorkersConfig",
    "validate_reward",
]

# OmegaConf reads these annotations at run time: keep typing's spellings (no PEP 604 unions).


@dataclass
class TermConfig:
    """One reward term: a registry ``name``, or a ``function`` in a file ``path`` / ``module``."""

    name: Optional[str] = None
    path: Optional[str] = None
    module: Optional[str] = None
    function: Optional[str] = None
    #: the term's output name (default: name, else function, else file stem)
    alias: Optional[str] = None
    weight: float = 1.0
    kwargs: Dict[str, Any] = field(default_factory=dict)
    timeout_s: Optional[float] = None
    executor: Optional[str] = None
    max_concurrency: Optional[int] = None
    retries: Optional[int] = None
    on_failure: Optional[str] = None
    #: the reward has no side effects: the process pool may replay it (see ExecutionPolicy.pure)
    pure: Optional[bool] = None
    #: a process-pool worker's memory limit while it runs this reward
    memory_limit_mb: Optional[int] = None
    #: routing by the sample's data_source (empty: the reward's own default)
    data_sources: List[str] = field(default_factory=list)
    #: routing by a tag in the sample's extra_info["tags"]
    tags: List[str] = field(default_factory=list)
    kind: Optional[str] = None
    adapter: str = "auto"


@dataclass
class PluginsConfig:
    autoload: bool = True
    load: List[str] = field(default_factory=list)
    block: List[str] = field(default_factory=list)
    #: reward name -> the plugin or distribution that provides it, where two installed sources register it
    prefer: Dict[str, str] = field(default_factory=dict)


@dataclass
class WorkersConfig:
    #: 0 = score in-process, no Ray
    num_workers: int = 0
    pool: str = "reward"
    resources: Dict[str, float] = field(default_factory=dict)
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    dispatch: str = "least_loaded"
    address: Optional[str] = None


@dataclass
class RewardModelConfig:
    enable: bool = False
    model_path: Optional[str] = None
    trust_remote_code: bool = False
    #: a module imported before the model loads (verl's ``reward_model.model.external_lib``: it
    #: registers a custom architecture with transformers)
    external_lib: Optional[str] = None
    kind: str = "discriminative"
    engine: Optional[str] = None
    pool: str = "reward_model"
    num_workers: int = 1
    n_gpus_per_node: int = 0
    nnodes: int = 1
    batch_size: Optional[int] = None
    max_length: Optional[int] = None
    #: inference-engine settings, kept as given (verl's ``reward_model.rollout.*``)
    rollout: Dict[str, Any] = field(default_factory=dict)


@dataclass
class SandboxConfig:
    url: Optional[str] = None
    max_concurrent: int = 8
    memory_limit_mb: int = 1024
    timeout_s: Optional[float] = None
    language: str = "python"


@dataclass
class RewardConfig:
    """The ``reward:`` section of a config."""

    rewards: List[TermConfig] = field(default_factory=list)
    aggregation: str = "weighted_sum"
    plugins: PluginsConfig = field(default_factory=PluginsConfig)
    workers: WorkersConfig = field(default_factory=WorkersConfig)
    reward_model: RewardModelConfig = field(default_factory=RewardModelConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    #: the verl reward manager a migrated config named; its behaviour is already in the terms'
    #: policies, and ``rewardhub check`` says which manager it was
    manager: Optional[str] = None


#: key path (``*`` for a list item) -> allowed values
CHOICES: dict[str, tuple[Any, ...]] = {
    "rewards.*.executor": ("inline", "thread", "process", "ray", None),
    "rewards.*.on_failure": ("zero", "nan", "drop", "raise", None),
    "rewards.*.kind": ("function", "batched", "group", "model", None),
    "rewards.*.adapter": ("auto", "rewardhub", "verl", "trl"),
    "aggregation": ("weighted_sum", "normalize_then_sum"),
    "workers.dispatch": ("least_loaded", "round_robin"),
    "reward_model.kind": ("discriminative", "generative"),
    "reward_model.engine": ("transformers", "vllm", None),
}

#: key path -> (minimum, inclusive?)
_MINIMA: dict[str, tuple[float, bool]] = {
    "rewards.*.timeout_s": (0, False),
    "rewards.*.max_concurrency": (1, True),
    "rewards.*.retries": (0, True),
    "rewards.*.memory_limit_mb": (1, True),
    "workers.num_workers": (0, True),
    "workers.num_cpus": (0, True),
    "workers.num_gpus": (0, True),
    "reward_model.num_workers": (0, True),
    "reward_model.batch_size": (1, True),
    "reward_model.max_length": (1, True),
    "sandbox.max_concurrent": (1, True),
    "sandbox.memory_limit_mb": (1, True),
    "sandbox.timeout_s": (0, False),
}

_TYPE_WORDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def _fields(cls: type) -> dict[str, dataclasses.Field[Any]]:
    return {f.name: f for f in dataclasses.fields(cls)}


def _unknown(where: str, key: str, cls: type) -> UsageError:
    names = sorted(_fields(cls))
    close = difflib.get_close_matches(key, names, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return UsageError(f"unknown key {where}{key!r} in the reward config\n{hint}allowed: {', '.join(names)}")


def _check_scalar(key: str, value: Any, typ: Any) -> Any:
    """Type-check one scalar the way OmegaConf would convert it, with our message."""
    optional = getattr(typ, "__origin__", None) is not None and type(None) in getattr(typ, "__args__", ())
    base = next((a for a in getattr(typ, "__args__", ()) if a is not type(None)), typ) if optional else typ
    if value is None:
        if optional or base is Any:
            return None
        raise UsageError(f"reward.{key}=null is not valid\nexpected {_TYPE_WORDS.get(base, base)}")
    if isinstance(value, str) and value.startswith("${"):
        return value  # an interpolation: checked when it resolves
    if base is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
    elif base is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                pass
    elif base is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
    elif base is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
    else:
        return value
    raise UsageError(f"reward.{key}={value!r} is not valid\nexpected {_TYPE_WORDS.get(base, base)}")


def _check_choice(pattern: str, key: str, value: Any) -> None:
    allowed = CHOICES.get(pattern)
    if allowed is not None and value not in allowed:
        shown = ", ".join(str(a) for a in allowed if a is not None)
        raise UsageError(f"reward.{key}={value!r} is not valid\nallowed: {shown}")
    minimum = _MINIMA.get(pattern)
    if minimum is not None and isinstance(value, (int, float)) and value is not None:
        low, inclusive = minimum
        if value < low or (value == low and not inclusive):
            rel = ">=" if inclusive else ">"
            raise UsageError(f"reward.{key}={value!r} is not valid\nallowed: a value {rel} {low}")


def _check_section(data: Any, cls: type, key: str, pattern: str) -> dict[str, Any]:
    """Check a mapping against a dataclass; returns the converted plain mapping."""
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise UsageError(f"reward.{key}={data!r} is not valid\nexpected a mapping with keys: "
                         f"{', '.join(sorted(_fields(cls)))}")
    out: dict[str, Any] = {}
    fields = _fields(cls)
    hints = _type_hints(cls)
    for k, v in data.items():
        if k not in fields:
            raise _unknown(f"{key}." if key else "", str(k), cls)
        sub, subpat = f"{key}.{k}" if key else str(k), f"{pattern}.{k}" if pattern else str(k)
        typ = hints[k]
        origin = getattr(typ, "__origin__", None)
        if isinstance(typ, type) and dataclasses.is_dataclass(typ):
            out[k] = _check_section(v, typ, sub, subpat)
        elif origin in (dict, Dict):
            if v is None:
                v = {}
            if not isinstance(v, Mapping):
                raise UsageError(f"reward.{sub}={v!r} is not valid\nexpected a mapping")
            vtyp = typ.__args__[1]
            out[k] = {str(kk): (_check_scalar(f"{sub}.{kk}", vv, vtyp) if vtyp is not Any else vv)
                      for kk, vv in v.items()}
        elif origin in (list, List):
            if v is None:
                v = []
            if isinstance(v, str) and k in ("data_sources", "tags", "load", "block"):
                v = [v]
            if not isinstance(v, (list, tuple)):
                raise UsageError(f"reward.{sub}={v!r} is not valid\nexpected a list")
            out[k] = [_check_scalar(f"{sub}[{i}]", x, str) for i, x in enumerate(v)]
        else:
            out[k] = _check_scalar(sub, v, typ)
            _check_choice(subpat, sub, out[k])
    return out


_HINTS: dict[type, dict[str, Any]] = {}


def _type_hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        import typing

        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _check_term(term: Any, index: int) -> dict[str, Any]:
    where = f"rewards[{index}]"
    if isinstance(term, str):
        term = {"name": term}
    if not isinstance(term, Mapping):
        raise UsageError(f"reward.{where}={term!r} is not valid\n"
                         "expected a mapping with 'name', or 'path'/'module' and 'function'")
    out = _check_section(term, TermConfig, where, "rewards.*")
    name, path, module = out.get("name"), out.get("path"), out.get("module")
    if name is None and path is None and module is None:
        raise UsageError(f"reward.{where} has neither 'name' nor 'path' nor 'module'\n"
                         "set name: <registered reward> (see `rewardhub list`), or path: file.py "
                         "with function: fn")
    if path is not None and module is not None:
        raise UsageError(f"reward.{where} sets both path={path!r} and module={module!r}\nkeep one")
    if out.get("function") is not None and path is None and module is None:
        raise UsageError(f"reward.{where}.function={out['function']!r} names no file or module\n"
                         "add path: file.py or module: package.module")
    return out


def term_alias(term: Mapping[str, Any]) -> str | None:
    """A term's output name: alias, else name, else function, else the file's stem."""
    import os

    for key in ("alias", "name", "function"):
        if term.get(key):
            return str(term[key])
    path = term.get("path")
    if path:
        return os.path.splitext(os.path.basename(str(path)))[0]
    return None


def validate_reward(section: Any) -> Any:
    """Check a (migrated) ``reward:`` section and return it as a structured ``DictConfig``.

    :raises UsageError: naming the key, the bad value and the allowed values.
    """
    from omegaconf import OmegaConf

    if section is None:
        section = {}
    if not isinstance(section, Mapping):
        raise UsageError(f"reward={section!r} is not valid\nexpected a mapping (the reward: section)")
    section = dict(section)
    terms = section.pop("rewards", None)
    if terms is None:
        terms = []
    if not isinstance(terms, (list, tuple)):
        raise UsageError(f"reward.rewards={terms!r} is not valid\nexpected a list of reward terms")
    checked = _check_section(section, RewardConfig, "", "")
    checked["rewards"] = [_check_term(t, i) for i, t in enumerate(terms)]
    aliases = [term_alias(t) for t in checked["rewards"]]
    seen = [a for a in aliases if a is not None]
    dup = sorted({a for a in seen if seen.count(a) > 1})
    if dup:
        raise UsageError(f"reward.rewards names {', '.join(map(repr, dup))} more than once\n"
                         "give each term a distinct 'alias'")
    base = OmegaConf.structured(RewardConfig)
    try:
        return OmegaConf.merge(base, checked)
    except Exception as exc:  # a case the checks above missed: still name the key
        key = getattr(exc, "full_key", "") or ""
        raise UsageError(f"reward.{key} is not valid: {getattr(exc, 'msg', exc)}") from None
