"""The ``rewardhub`` command line: one place that turns errors into exit codes."""

from __future__ import annotations

import argparse
import enum
import importlib
import sys
from collections.abc import Sequence
from typing import Any

from .errors import RewardhubError
from .errors import UsageError

__all__ = ["ExitCode", "main", "BUILTIN_COMMANDS"]

#: subcommand modules shipped with the core, in help order
BUILTIN_COMMANDS: tuple[str, ...] = (
    "rewardhub._commands.list",
    "rewardhub._commands.show",
    "rewardhub._commands.migrate",
    "rewardhub._commands.check",
    "rewardhub._commands.score",
    "rewardhub._commands.doctor",
    "rewardhub._commands.serve",
    "rewardhub._commands.new",
    "rewardhub._commands.test",
    "rewardhub._commands.tasks",
    "rewardhub._commands.data",
    "rewardhub._commands.judge",
    "rewardhub._commands.grader",
)


class ExitCode(enum.IntEnum):
    OK = 0
    ERROR = 1
    USAGE_ERROR = 2


class _Formatter(argparse.HelpFormatter):
    """argparse's help formatter, sized to the terminal without ``shutil``: argparse builds one for
    every ``add_argument`` (to check its metavar), and ``shutil`` (with bz2 and lzma behind it) is
    ~4 ms of every command's start-up that prints no help."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: int | None = None) -> None:
        if width is None:
            width = _terminal_columns() - 2
        super().__init__(prog, indent_increment, max_help_position, width)


def _terminal_columns() -> int:
    """What ``shutil.get_terminal_size().columns`` says: $COLUMNS, else the terminal's, else 80."""
    import os

    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> Any:  # argparse would print usage + exit 2 itself
        if message.startswith("unrecognized arguments: "):
            from .config.overrides import is_override_word

            words = message.partition(": ")[2].split()
            late = [w for w in words if is_override_word(w)]
            if late:
                raise UsageError(f"override {late[0]!r} comes after an option: KEY=VALUE overrides go right "
                                 "after the positional arguments, before any -o/--option\n"
                                 f"e.g. {self.prog} CONFIG DATA {' '.join(late)} -o OUT.jsonl")
        raise UsageError(f"{message}\nsee `{self.prog} --help`")


def _command_modules(wanted: str | None = None) -> list[tuple[Any, str | None]]:
    """Every subcommand's module, with the plugin that provides it (``None`` for a builtin); only
    ``wanted``'s when it names a builtin command (plugin commands are found through entry points, which
    takes a scan of every installed distribution)."""
    for name in BUILTIN_COMMANDS:
        if wanted and name.rpartition(".")[2] == wanted:
            return [(importlib.import_module(name), None)]
    mods: list[tuple[Any, str | None]] = []
    for name in BUILTIN_COMMANDS:
        try:
            mods.append((importlib.import_module(name), None))
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
    from ._discovery import COMMAND_GROUP
    from ._discovery import scan_entry_points

    for ep in scan_entry_points((COMMAND_GROUP,)):
        origin = f"{ep.dist or '?'} {ep.version or ''}".strip() + f" (entry point {ep.name} = {ep.value})"
        try:
            mods.append((ep.load(), origin))
        except (Exception, SystemExit) as exc:
            mods.append((_BrokenCommand(ep.name, f"{ep.dist} {ep.version}", exc), origin))
    return mods


class _BrokenCommand:
    HELP = "(broken: see `rewardhub list --plugins`)"

    def __init__(self, name: str, dist: str, exc: BaseException) -> None:
        self.NAME = name
        self._msg = f"command {name!r} from {dist} failed to load: {type(exc).__name__}: {exc}"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("rest", nargs=argparse.REMAINDER)

    def run(self, args: argparse.Namespace) -> int:
        raise RewardhubError(self._msg)


def build_parser(wanted: str | None = None) -> argparse.ArgumentParser:
    """The CLI's parser; with ``wanted`` (the command asked for), built for that command alone when
    it is a builtin one."""
    parser = _Parser(prog="rewardhub", description="Reward functions for LLM RL: list, check, score, train.")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    taken: dict[str, str] = {}
    for mod, origin in _command_modules(wanted):
        if origin is None:
            _add_command(sub, mod)
            taken[mod.NAME] = "rewardhub itself"
            continue
        problem = _plugin_command_problem(mod, taken)
        if problem:
            _warn(f"command plugin {origin}: {problem}; it is left out (fix or uninstall the plugin)")
            continue
        try:
            _add_command(sub, mod)
        except (Exception, SystemExit) as exc:  # its add_arguments failed: the command runs as broken
            _warn(f"command plugin {origin}: its options cannot be added ({type(exc).__name__}: {exc})")
            broken = _BrokenCommand(mod.NAME, origin, exc)
            sub.choices[mod.NAME].set_defaults(_run=broken.run)
        taken[mod.NAME] = origin
    return parser


def _add_command(sub: Any, mod: Any) -> None:
    text = getattr(mod, "HELP", None) or ""
    p = sub.add_parser(mod.NAME, help=text, description=text)
    p.set_defaults(_run=mod.run)
    mod.add_arguments(p)


def _plugin_command_problem(mod: Any, taken: dict[str, str]) -> str | None:
    """Why a plugin's command module cannot be added (``None`` when it can)."""
    missing = [a for a in ("NAME", "add_arguments", "run") if not hasattr(mod, a)]
    if missing:
        return (
            f"its object has no {', '.join(missing)} (a command module defines NAME, HELP, add_arguments, "
            "run)"
        )
    name = mod.NAME
    if not isinstance(name, str) or not name or name.startswith("-") or any(c.isspace() for c in name):
        return f"its NAME {name!r} is not a command name"
    if not isinstance(getattr(mod, "HELP", ""), str):
        return f"its HELP {mod.HELP!r} is not text"
    if name in taken:
        return f"it names its command {name!r}, which {taken[name]} already provides"
    return None


def _warn(line: str) -> None:
    print(f"WARNING: {line}", file=sys.stderr)


#: extension modules built with nanobind, which report what the interpreter did not free at exit as
#: "leaked" (pages of it): with one of them loaded (torch's triton, once vLLM is installed) the
#: objects are left for the interpreter's last collections
_NANOBIND_MODULES = frozenset({"triton"})


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (0 ok, 1 error, 2 usage error).

    Run as the program (``argv`` None), it freezes the garbage collector's objects on the way out:
    the interpreter's last collections would otherwise walk every object that math-verify, sympy
    & co. made, ~0.3 s of every ``rewardhub score`` (the exit itself, atexit hooks included, is unchanged);
    not when a nanobind extension is loaded (see ``_NANOBIND_MODULES``).
    """
    try:
        return _main(argv)
    finally:
        if argv is None and not any(m.split(".", 1)[0] in _NANOBIND_MODULES for m in sys.modules):
            import gc

            gc.freeze()


def _main(argv: Sequence[str] | None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] in (["--version"], ["-V"]):
        from .registry import core_version

        print(f"rewardhub {core_version()}")
        return ExitCode.OK
    import warnings

    from .errors import RewardhubDeprecationWarning

    warnings.simplefilter("default", RewardhubDeprecationWarning)  # users must see every migrated key
    try:
        parser = build_parser(args_list[0] if args_list else None)
        args = parser.parse_args(args_list)
        if args.version:
            from .registry import core_version

            print(f"rewardhub {core_version()}")
            return ExitCode.OK
        if not getattr(args, "_run", None):
            parser.print_help()
            return ExitCode.USAGE_ERROR
        return int(args._run(args) or 0)
    except UsageError as exc:
        _print_error(exc)
        return ExitCode.USAGE_ERROR
    except RewardhubError as exc:
        _print_error(exc)
        return ExitCode.ERROR
    except KeyboardInterrupt as exc:  # the user's Ctrl-C (or SIGTERM) outside a command's own handling
        return _interrupted(exc)
    except BrokenPipeError:
        return ExitCode.OK


def _interrupted(exc: BaseException | None = None) -> int:
    """Say in one line that the run was stopped; the exit status a shell gives a command its signal
    stopped: 128 + the signal's number (130 for Ctrl-C)."""
    name = getattr(exc, "signal_name", "SIGINT")
    signum = getattr(exc, "signum", 2)
    try:
        print(f"ERROR: interrupted ({name})", file=sys.stderr, flush=True)
    except OSError:
        pass
    return 128 + int(signum)


def _print_error(exc: BaseException) -> None:
    lines = str(exc).splitlines() or [type(exc).__name__]
    print(f"ERROR: {lines[0]}", file=sys.stderr)
    for line in lines[1:]:
        print(f"  {line}", file=sys.stderr)
    where = getattr(exc, "where", None)
    if where:
        from .execution import debug_enabled

        if debug_enabled():
            print(f"where the reward failed (most recent call last):\n{where}", file=sys.stderr)
        else:
            print("  (--debug or REWARDHUB_DEBUG=1 shows where in the reward it failed)", file=sys.stderr)
