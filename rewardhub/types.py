"""RewardSpec and ExecutionPolicy: the small, picklable things that cross process boundaries, and the
allowed values of a reward's settings (the config's validator reads them too)."""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace
from typing import Any

__all__ = ["ADAPTERS", "AGGREGATIONS", "KINDS", "ON_FAILURE", "EXECUTORS", "ExecutionPolicy", "InputRow",
           "RewardSpec", "sample_name"]

#: reward kinds
KINDS = ("function", "batched", "group", "model")
#: what a failed sample gets
ON_FAILURE = ("zero", "nan", "drop", "raise")
#: where a reward runs
EXECUTORS = ("inline", "thread", "process", "ray")
#: how a reward's signature is called
ADAPTERS = ("auto", "rewardhub", "verl", "trl")
#: how the terms' scores become one reward
AGGREGATIONS = ("weighted_sum", "normalize_then_sum")


class InputRow(int):
    """A sample's label (``Runner.score``'s ``indices``) when it is a row of an input file: its 0-based
    place in the whole input, named ``row N`` (1-based, as an editor numbers lines) in messages."""

    __slots__ = ()

    def __str__(self) -> str:
        return f"row {int(self) + 1}"

    def __format__(self, spec: str) -> str:
        return str(self) if not spec else int(self).__format__(spec)


def sample_name(label: object) -> str:
    """How a message names a sample by its label: ``row N`` for an :class:`InputRow`, else ``sample N``
    (its place in its batch or request)."""
    return str(label) if isinstance(label, InputRow) else f"sample {label}"


@dataclass(frozen=True, slots=True)
class ExecutionPolicy:
    """How one reward runs; a config term overrides any field it sets.

    ``timeout_s`` ``None`` means no limit; ``max_concurrency`` ``None`` means the executor's default.
    ``pure``: the reward has no side effects and gives the same score for the same sample
    (the contract check of ``rewardhub new``'s test compares two calls); off unless declared.
    ``memory_limit_mb``: how much memory (the data segment: heap and private mappings) a process-pool worker
    may take while it runs this reward, on top of what it started with (inherited from the scoring process it
    was forked from); a call past it fails with ``MemoryError``.
    ``cache``: the reward is expensive (a judge, a sandbox, a reward model): it runs once per distinct input
    (see :mod:`rewardhub.execution._cache`); a plugin turns it on for its rewards, a term with ``cache``.
    """

    executor: str = "inline"
    timeout_s: float | None = None
    max_concurrency: int | None = None
    retries: int = 0
    on_failure: str = "nan"  #: a failure is never a score unless a reward or term says so
    pure: bool = False
    memory_limit_mb: int | None = None
    cache: bool = False
    #: requests per minute (spaced evenly; a retry is a request): to the endpoint of a reward that takes
    #: ``base_url``, else the term's calls; ``None``: no limit
    max_rpm: float | None = None

    def merged(self, **overrides: Any) -> ExecutionPolicy:
        """Return a copy with every override that is not ``None`` applied."""
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})


@dataclass(frozen=True, slots=True)
class RewardSpec:
    """Everything needed to find a reward again in another process, and nothing live.

    :param name: the registry name.
    :param target: ``"package.module:attr"``, or ``"/abs/file.py:attr"`` for a file target.
    :param source: builtin | entry-point | plugin | config.
    :param dist: the distribution that provides it (``None`` for a loose file).
    :param version: that distribution's version.
    :param sha256: content hash of a file target.
    :param kind: function | batched | group | model.
    :param capabilities: e.g. ``("async",)``.
    :param summary: first line of the docstring, shown by ``rewardhub list``.
    :param policy: the reward's default execution policy.
    :param params: keyword arguments bound to the target at call time (sorted pairs).
    :param data_sources: default routing: the data sources this reward applies to (empty: all).
    :param plugin: name of the plugin (entry point or module) that registered it.
    :param status: ``ok``, ``broken``, or ``conflict`` (two installed sources register the name;
        see :attr:`RewardRegistry.conflicts <rewardhub.registry.RewardRegistry.conflicts>`).
    :param error: why it is broken or conflicting.
    """

    name: str
    target: str
    source: str = "plugin"
    dist: str | None = None
    version: str | None = None
    sha256: str | None = None
    kind: str = "function"
    capabilities: tuple[str, ...] = ()
    summary: str = ""
    policy: ExecutionPolicy = field(default_factory=ExecutionPolicy)
    params: tuple[tuple[str, Any], ...] = ()
    data_sources: tuple[str, ...] = ()
    plugin: str | None = None
    status: str = "ok"
    error: str | None = None

    @property
    def is_file_target(self) -> bool:
        """True when the target names a Python file rather than a module."""
        module = self.target.rpartition(":")[0]
        return module.endswith(".py") or "/" in module or "\\" in module

    @property
    def origin(self) -> str:
        """Human description of where the spec came from (used in error messages)."""
        if self.source == "builtin":
            return "builtin"
        if self.dist:
            return f"{self.dist} {self.version} ({self.plugin or self.target})"
        if self.source == "config":
            return f"config ({self.target})"
        return f"plugin {self.plugin!r}"

    def with_(self, **changes: Any) -> RewardSpec:
        """Return a copy with ``changes`` applied."""
        return replace(self, **changes)
