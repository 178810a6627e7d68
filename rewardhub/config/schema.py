"""The ``reward:`` section's schema (frozen dataclasses) and its validation.

:func:`validate_reward` turns a raw section (a mapping or a ``DictConfig``) into a :class:`RewardConfig`
once, in the loader; every layer after it (runner, Ray executor, worker setup, reward workers, trainer)
takes that object as it is. The objects are frozen and pickle, so the driver ships them to Ray as they are.

Validation is :func:`rewardhub.config.fields.check_section` (the one validator, shared with the trainer):
errors name the key, the bad value and the allowed values.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import Any
from typing import TypeVar
from typing import cast

from ..errors import UsageError
from ..types import ADAPTERS
from ..types import AGGREGATIONS
from ..types import EXECUTORS
from ..types import KINDS
from ..types import ON_FAILURE
from .fields import Rule
from .fields import above
from .fields import at_least
from .fields import check_min_max
from .fields import check_section
from .fields import finite
from .fields import has_interpolation
from .fields import invalid
from .fields import one_of
from .frozen import FrozenDict
from .frozen import freeze
from .frozen import thaw

__all__ = [
    "CHOICES",
    "RULES",
    "AutoscaleConfig",
    "PluginsConfig",
    "RemoteConfig",
    "RewardConfig",
    "RewardModelConfig",
    "SandboxConfig",
    "TermConfig",
    "WorkersConfig",
    "as_dict",
    "check_term_source",
    "check_url",
    "checked_term",
    "validate_reward",
]

def _freeze(section: Any, *names: str) -> None:
    """A frozen section's containers frozen too, however it was made (:func:`.frozen.freeze`), and its
    ``autoscale`` a section."""
    for name in names:
        object.__setattr__(section, name, freeze(getattr(section, name)))
    scale = getattr(section, "autoscale", None)
    if isinstance(scale, Mapping):  # built from checked plain data
        object.__setattr__(section, "autoscale", AutoscaleConfig(**scale))


# check_section reads these annotations at run time (typing.get_type_hints: `X | None` and `tuple[X, ...]`
# are fine on Python >= 3.10).


@dataclass(frozen=True)
class TermConfig:
    """One reward term: a registry ``name``, or a ``function`` in a file ``path`` / ``module``."""

    name: str | None = None
    path: str | None = None
    module: str | None = None
    function: str | None = None
    #: the term's output name (default: name, else function, else file stem)
    alias: str | None = None
    weight: float = 1.0
    kwargs: Mapping[str, Any] = field(default_factory=FrozenDict)
    timeout_s: float | None = None
    executor: str | None = None
    max_concurrency: int | None = None
    retries: int | None = None
    on_failure: str | None = None
    #: the reward has no side effects and is deterministic (see ExecutionPolicy.pure)
    pure: bool | None = None
    #: a process-pool worker's memory limit while it runs this reward
    memory_limit_mb: int | None = None
    #: one call per distinct input (see ExecutionPolicy.cache); unset: the reward's own default
    cache: bool | None = None
    #: requests per minute where they go: a judge's (a reward taking base_url) to its endpoint, each try;
    #: any other term's calls, each try (executor inline or thread); across a Ray cluster's processes
    max_rpm: float | None = None
    #: routing by the sample's data_source: unset (``None``) keeps the reward's own routes (its
    #: spec's ``data_sources``); a list replaces them; ``[]`` turns routing by data source off
    data_sources: tuple[str, ...] | None = None
    #: routing by a tag in the sample's extra_info["tags"]
    tags: tuple[str, ...] = ()
    kind: str | None = None
    adapter: str = "auto"
    #: a judge's gate: ``{gold: FILE, min_kappa: K}`` or ``{gold: FILE, min_rho: R}`` (builtin/judging)
    calibration: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        _freeze(self, "kwargs", "data_sources", "tags", "calibration")


@dataclass(frozen=True)
class PluginsConfig:
    autoload: bool = True
    load: tuple[str, ...] = ()
    block: tuple[str, ...] = ()
    #: reward name -> the plugin or distribution that provides it, where two installed sources register it
    prefer: Mapping[str, str] = field(default_factory=FrozenDict)

    def __post_init__(self) -> None:
        _freeze(self, "load", "block", "prefer")


@dataclass(frozen=True)
class AutoscaleConfig:
    min_workers: int = 1
    max_workers: int | None = None
    target_wait_s: float = 1.0
    idle_s: float = 60.0


@dataclass(frozen=True)
class WorkersConfig:
    #: 0 = score in-process, no Ray
    num_workers: int = 0
    pool: str = "reward"
    resources: Mapping[str, float] = field(default_factory=FrozenDict)
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    dispatch: str = "least_loaded"
    address: str | None = None
    #: seconds one score call (a chunk of samples) may take before its worker counts as hung and is
    #: restarted, its chunk re-scored (None: the terms' timeout_s x the chunk's samples, plus 30 s)
    call_timeout_s: float | None = None
    #: seconds a restarted worker may wait for Ray to place it (its node gone, no other with room) before
    #: the pool goes on without it, saying so in one warning
    replace_timeout_s: float = 60.0
    autoscale: AutoscaleConfig | None = None

    def __post_init__(self) -> None:
        _freeze(self, "resources")


@dataclass(frozen=True)
class RewardModelConfig:
    enable: bool = False
    model_path: str | None = None
    trust_remote_code: bool = False
    #: a module imported before the model loads (verl's ``reward_model.model.external_lib``: it
    #: registers a custom architecture with transformers)
    external_lib: str | None = None
    kind: str = "discriminative"
    engine: str | None = None
    pool: str = "reward_model"
    num_workers: int = 1
    n_gpus_per_node: int = 0
    nnodes: int = 1
    batch_size: int | None = None
    max_length: int | None = None
    #: inference-engine settings, kept as given (verl's ``reward_model.rollout.*``)
    rollout: Mapping[str, Any] = field(default_factory=FrozenDict)
    autoscale: AutoscaleConfig | None = None

    def __post_init__(self) -> None:
        _freeze(self, "rollout")


@dataclass(frozen=True)
class SandboxConfig:
    url: str | None = None
    max_concurrent: int = 8
    memory_limit_mb: int = 1024
    timeout_s: float | None = None
    language: str = "python"


@dataclass(frozen=True)
class RemoteConfig:
    """``reward.remote``: the ``rewardhub serve`` server a trainer scores on (``reward.remote: URL`` is
    ``{url: URL}``), and how long its client waits and retries (see :mod:`rewardhub.execution.remote`)."""

    url: str = ""
    #: seconds one request waits for its answer
    timeout_s: float = 600.0
    #: seconds one connection may take to open
    connect_timeout_s: float = 10.0
    #: seconds, from a request's first failure, that failures which pass (no connection, 502/503/504,
    #: an answer cut or not there within timeout_s) are retried with backoff; then the run stops
    retry_for_s: float = 300.0


@dataclass(frozen=True)
class RewardConfig:
    """The ``reward:`` section of a config."""

    rewards: tuple[TermConfig, ...] = ()
    aggregation: str = "weighted_sum"
    plugins: PluginsConfig = field(default_factory=PluginsConfig)
    workers: WorkersConfig = field(default_factory=WorkersConfig)
    reward_model: RewardModelConfig = field(default_factory=RewardModelConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    #: the verl reward manager a migrated config named; its behaviour is already in the terms'
    #: policies, and ``rewardhub check`` says which manager it was
    manager: str | None = None
    #: a `rewardhub serve` server: the trainer scores there, with the server's config's terms (so
    #: ``rewards`` stays empty: setting both is an error)
    remote: RemoteConfig | None = None


#: key path (``*`` for a list item) -> allowed values: the one table every check of these keys reads
#: (the values a reward's decorator also checks are spelled in :mod:`rewardhub.types`; ``None``: unset)
CHOICES: dict[str, tuple[Any, ...]] = {
    "rewards.*.executor": (*EXECUTORS, None),
    "rewards.*.on_failure": (*ON_FAILURE, None),
    "rewards.*.kind": (*KINDS, None),
    "rewards.*.adapter": ADAPTERS,
    "aggregation": AGGREGATIONS,
    "workers.dispatch": ("least_loaded", "round_robin"),
    "reward_model.kind": ("discriminative", "generative"),
    "reward_model.engine": ("transformers", "vllm", None),
}

#: key path -> its rule (the choices above, and the bounds)
RULES: dict[str, Rule] = {
    **{key: one_of(*allowed) for key, allowed in CHOICES.items()},
    "rewards.*.weight": finite("a term's weight may be negative (a penalty), not NaN or infinite"),
    "rewards.*.timeout_s": above(0),
    "workers.call_timeout_s": above(0),
    "workers.replace_timeout_s": above(0),
    **{f"{s}.autoscale.{k}": at_least(1) if k.endswith("workers") else above(0)
       for s in ("workers", "reward_model") for k in ("min_workers", "max_workers", "target_wait_s",
                                                      "idle_s")},
    "rewards.*.max_concurrency": at_least(1),
    "rewards.*.retries": at_least(0),
    "rewards.*.memory_limit_mb": at_least(1),
    "rewards.*.max_rpm": above(0),
    "workers.num_workers": at_least(0),
    "workers.num_cpus": at_least(0),
    "workers.num_gpus": at_least(0),
    "workers.resources.*": at_least(0),
    "reward_model.num_workers": at_least(0),
    "reward_model.batch_size": at_least(1),
    "reward_model.max_length": at_least(1),
    "reward_model.n_gpus_per_node": at_least(0),
    "reward_model.nnodes": at_least(0),
    "sandbox.max_concurrent": at_least(1),
    "sandbox.memory_limit_mb": at_least(1),
    "sandbox.timeout_s": above(0),
    "remote.timeout_s": above(0),
    "remote.connect_timeout_s": above(0),
    "remote.retry_for_s": at_least(0, "0 gives up at the first failure"),
}


def _check_term(term: Any, index: int) -> dict[str, Any]:
    key = f"reward.rewards[{index}]"
    if isinstance(term, str):
        term = {"name": term}
    if isinstance(term, Mapping) and "grader" in term:  # an OpenAI RFT grader (rewardhub.graders)
        from ..graders import grader_term

        term = grader_term(term, key)
    if not isinstance(term, Mapping):
        raise invalid(key, term, "expected a mapping with 'name', or 'path'/'module' and 'function'")
    out = check_section(term, TermConfig, key, RULES, "rewards.*")
    check_term_source(out.get("name"), out.get("path"), out.get("module"), out.get("function"), key)
    return out


def check_term_source(name: Any, path: Any, module: Any, function: Any, where: str) -> None:
    """A term names a registered reward, or a file or a module (one of them) where its function is."""
    if name is None and path is None and module is None:
        raise UsageError(f"{where} has neither 'name' nor 'path' nor 'module'\n"
                         "set name: <registered reward> (see `rewardhub list`), or path: file.py "
                         "with function: fn")
    if path is not None and module is not None:
        raise UsageError(f"{where} sets both path={path!r} and module={module!r}\nkeep one")
    if function is not None and path is None and module is None:
        raise UsageError(f"{where}.function={function!r} names no file or module\n"
                         "add path: file.py or module: package.module")


def checked_term(term: Any, index: int = 0) -> TermConfig:
    """A checked ``reward.rewards[index]`` (a mapping or a registry name) as a :class:`TermConfig`."""
    return term if isinstance(term, TermConfig) else _build(TermConfig, _check_term(term, index))


def check_url(url: Any, key: str = "reward.remote") -> str:
    """``url`` when it is an http(s) URL of a server; else a :class:`UsageError` naming ``key``."""
    if not isinstance(url, str) or not url.startswith(("http://", "https://")) or len(url) < 10:
        raise UsageError(f"{key}={url!r} is not a server URL\n"
                         "give the address `rewardhub serve` printed, e.g. http://10.0.0.5:8000")
    return url.rstrip("/")


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


def validate_reward(section: Any) -> RewardConfig:
    """Check a (migrated) ``reward:`` section and return it as a frozen :class:`RewardConfig`.

    A :class:`RewardConfig` is returned as it is (it was checked when it was made); a ``DictConfig`` or a
    mapping with interpolations (``${oc.env:KEY}``) is resolved first.

    :raises UsageError: naming the key, the bad value and the allowed values.
    """
    if isinstance(section, RewardConfig):
        return section
    if section is None:
        section = {}
    if has_interpolation(section):
        from omegaconf import OmegaConf

        from ._resolve import resolve_or_explain

        section = resolve_or_explain(
            section if OmegaConf.is_config(section) else OmegaConf.create(dict(section)), "reward"
        )
    if not isinstance(section, Mapping):
        raise invalid("reward", section, "expected a mapping (the reward: section)")
    section = dict(section)
    remote_key = "reward.remote"
    remote = section.get("remote")
    if isinstance(remote, Mapping):
        remote_key = "reward.remote.url"
    elif remote is not None:  # reward.remote: URL
        section["remote"] = {"url": remote}
    terms = section.pop("rewards", None)
    if terms is None:
        terms = []
    if not isinstance(terms, (list, tuple)):
        raise invalid("reward.rewards", terms, "expected a list of reward terms")
    checked = check_section(section, RewardConfig, "reward", RULES)
    for sec in ("workers", "reward_model"):
        check_min_max((checked.get(sec) or {}).get("autoscale"), f"reward.{sec}.autoscale", "workers")
    rewards = [_check_term(t, i) for i, t in enumerate(terms)]
    aliases = [term_alias(t) for t in rewards]
    seen = [a for a in aliases if a is not None]
    dup = sorted({a for a in seen if seen.count(a) > 1})
    if dup:
        raise UsageError(f"reward.rewards names {', '.join(map(repr, dup))} more than once\n"
                         "give each term a distinct 'alias'")
    if checked.get("remote") is not None:
        checked["remote"] = {**checked["remote"], "url": check_url(checked["remote"].get("url"), remote_key)}
        if rewards:
            raise UsageError(
                "reward.rewards and reward.remote are both set: with reward.remote the server scores with "
                "its own config's rewards, and reward.rewards would be ignored\n"
                "remove reward.rewards (the server's config names the rewards), or reward.remote to "
                "score with reward.rewards here"
            )
    return _build(RewardConfig, {**checked, "rewards": tuple(_build(TermConfig, t) for t in rewards)})


def _build(cls: type[_T], values: Mapping[str, Any]) -> _T:
    """``cls`` from checked ``values``: nested sections built too, missing keys at their defaults."""
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cast(Any, cls)):
        if f.name not in values:
            continue
        v = values[f.name]
        sub = _SECTIONS.get(f.name) if cls is RewardConfig else None
        if f.name == "remote" and v is None:  # no server: stays None
            kwargs[f.name] = None
        else:
            kwargs[f.name] = _build(sub, v or {}) if sub is not None and not isinstance(v, sub) else v
    return cls(**kwargs)


_T = TypeVar("_T")

_SECTIONS: dict[str, type] = {"plugins": PluginsConfig, "workers": WorkersConfig,
                              "reward_model": RewardModelConfig, "sandbox": SandboxConfig,
                              "remote": RemoteConfig}


def as_dict(section: RewardConfig) -> dict[str, Any]:
    """A typed ``reward:`` section as plain data (what a run writes out, or a tool that edits it reads)."""
    out: dict[str, Any] = thaw(dataclasses.asdict(section))
    return out
