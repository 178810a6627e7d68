"""Exception and warning classes of rewardhub, each carrying its context."""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Sequence
from typing import Any

__all__ = [
    "BrokenRewardError",
    "ConflictingRewardError",
    "DuplicateRewardError",
    "Interrupted",
    "PluginLoadError",
    "RewardExecutionError",
    "RewardhubDeprecationWarning",
    "RewardhubError",
    "RewardhubWarning",
    "UnknownRewardError",
    "UsageError",
]

#: the ``kind`` of an error for a request over a server's published limits (rows, bytes)
TOO_LARGE = "too_large"


class RewardhubError(Exception):
    """Base class of every error rewardhub raises on purpose.

    ``kind`` says what went wrong for a program that must tell errors apart (``rewardhub serve``
    answers a :data:`TOO_LARGE` request 413), never by reading the message.
    """
    kind: str = "error"

    def __init__(self, *args: Any, kind: str | None = None) -> None:
        super().__init__(*args)
        if kind is not None:
            self.kind = kind


class UsageError(RewardhubError):
    """Bad configuration or command-line input; the CLI prints it and exits with 2."""


class PluginLoadError(RewardhubError):
    """A plugin or reward entry point could not be imported.

    :param plugin_name: the entry point or plugin name.
    :param dist: ``"name version"`` of the distribution that declared it, if known.
    """

    def __init__(self, message: str, *, plugin_name: str, dist: str | None = None) -> None:
        super().__init__(message)
        self.plugin_name = plugin_name
        self.dist = dist


class BrokenRewardError(PluginLoadError):
    """A reward that was listed but cannot be loaded was used."""


class DuplicateRewardError(RewardhubError, ValueError):
    """Two sources register a reward under the same name."""

    def __init__(self, name: str, first: str, second: str) -> None:
        super().__init__(
            f"reward {name!r} registered twice: {first} and {second}\n"
            "rename one, or block one of the plugins with reward.plugins.block: [<plugin or distribution>]"
        )
        self.name = name
        self.first = first
        self.second = second


class ConflictingRewardError(RewardhubError, LookupError):
    """A config uses a reward name that two installed sources register; the config must choose."""

    def __init__(self, name: str, candidates: Sequence[tuple[str, str]]) -> None:
        """:param candidates: (what to write in ``prefer``/``block``, human origin) per source."""
        shown = " and ".join(origin for _, origin in candidates)
        pick = candidates[0][0]
        others = ", ".join(key for key, _ in candidates[1:])
        super().__init__(
            f"reward {name!r} is registered by {len(candidates)} installed sources: {shown}\n"
            f"choose one in the config: reward.plugins.prefer: {{{name}: {pick}}}, or block the others: "
            f"reward.plugins.block: [{others}]"
        )
        self.name = name
        self.candidates = [key for key, _ in candidates]


class UnknownRewardError(RewardhubError, LookupError):
    """A reward name that no source registers."""

    def __init__(self, name: str, available: Iterable[str], where: str | None = None) -> None:
        import difflib
        import sys
        import sysconfig

        self.name = name
        self.available = tuple(sorted(available))
        self.close = tuple(difflib.get_close_matches(name, self.available, n=3, cutoff=0.6))
        lines = [f"unknown reward {name!r}" + (f" {where}" if where else "")]
        if self.close:
            lines.append("did you mean: " + ", ".join(repr(c) for c in self.close) + "?")
        py = sys.executable
        env = (f"virtual environment {sys.prefix}" if sys.prefix != sys.base_prefix
               else f"site-packages {sysconfig.get_path('purelib')}")
        lines += [f"searched the {len(self.available)} rewards installed for {py} ({env})",
                  f"all names: `rewardhub list`; to install a plugin here: {py} -m pip install <plugin>"]
        super().__init__("\n".join(lines))

    def __str__(self) -> str:  # LookupError would not quote, but be explicit
        return str(self.args[0])


class RewardExecutionError(RewardhubError):
    """A reward failed on a sample and its policy is ``on_failure: raise``."""

    def __init__(self, message: str, *, reward: str, index: int | None = None,
                 where: str | None = None) -> None:
        super().__init__(message)
        self.reward = reward
        self.index = index
        #: the last frames of the reward's own code where it raised (shown with ``--debug``)
        self.where = where

    def __reduce__(self) -> Any:
        """Pickled with its keywords (a Ray actor that raises it hands it to the driver)."""
        import functools

        return functools.partial(type(self), reward=self.reward, index=self.index, where=self.where), (
            self.args[0],)


class Interrupted(KeyboardInterrupt):
    """The user stopped the run (Ctrl-C or SIGTERM), as opposed to a reward raising
    ``KeyboardInterrupt`` itself (which fails that sample only).

    :param signal_name: ``"SIGINT"``, ``"SIGTERM"`` or ``"SIGHUP"``.
    """

    def __init__(self, signal_name: str = "SIGINT") -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name

    @property
    def signum(self) -> int:
        """The signal's number (a command stopped by it exits ``128 + signum``)."""
        import signal

        try:
            return int(signal.Signals[self.signal_name])
        except KeyError:
            return int(signal.SIGINT)


class RewardhubWarning(UserWarning):
    """Base class of rewardhub's warnings."""


class RewardhubDeprecationWarning(RewardhubWarning, DeprecationWarning):
    """A legacy key or API that still works but has a new spelling."""


for _name in __all__:  # shown and pickled as rewardhub.X, where users import them from
    globals()[_name].__module__ = "rewardhub"
