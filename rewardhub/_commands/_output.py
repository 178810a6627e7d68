"""The writing side of ``rewardhub score``: outputs never destroy an input, and a stopped run keeps its rows.

- every output is checked before anything runs: not an input (same file), not a folder, its folder
  exists and is writable;
- scored rows go to a temporary file next to the output, renamed over it at the end; a failed run
  leaves the output as it was; an interrupted one, or one that failed after rows were scored (a remote
  server that died), keeps its rows in ``OUTPUT.partial``;
- while rewards run, anything they print goes to stderr, never into the rows on stdout.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import sys
import threading
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Any

from ..errors import Interrupted
from ..errors import RewardhubError
from ..errors import UsageError
from ..scoring import nulls_for_non_finite

__all__ = [
    "ScoredRows",
    "check_outputs",
    "prints_to_stderr",
    "stop_on_signals",
    "write_summary",
]

if TYPE_CHECKING:
    from ._parquet_out import ParquetRows

#: one encoder for every row (``json.dumps`` with options builds one per call)
_ENCODE = json.JSONEncoder(sort_keys=True, default=str, allow_nan=True).encode

# ---- before the run ----------------------------------------------------------------------------

def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet)
        return os.path.realpath(a) == os.path.realpath(b)


def _inside(path: str, folder: str) -> bool:
    """Whether ``path`` is in ``folder`` or below it (links resolved)."""
    real, top = os.path.realpath(path), os.path.realpath(folder)
    return os.path.commonpath([real, top]) == top


def _is_special(path: str) -> bool:
    """A device or pipe (``/dev/stdout``, a fifo): written straight, never renamed over."""
    try:
        import stat

        return not stat.S_ISREG(os.stat(path).st_mode) and not os.path.isdir(path)
    except OSError:
        return False


def check_outputs(output: str | None, summary_json: str | None, inputs: Sequence[str]) -> None:
    """Refuse an output that is an input (or the other output), inside a folder that is an input, a folder,
    or in a missing or read-only folder; nothing has been read or written yet when this raises."""
    outs = [(flag, path) for flag, path in (("-o", output), ("--summary-json", summary_json)) if path]
    ins = [p for p in inputs if p and p != "-"]
    for n, (flag, path) in enumerate(outs):
        for k, other in enumerate(ins + [p for _, p in outs[:n]]):
            if _same_file(path, other):
                what = "an input" if k < len(ins) else "the other output"
                raise UsageError(f"{flag} {path!r} is the same file as {what} ({other!r}); writing it "
                                 "would destroy it\nwrite the output to another file")
        for folder_in in (p for p in ins if os.path.isdir(p)):
            if _inside(path, folder_in):
                raise UsageError(
                    f"{flag} {path!r} is inside the folder {folder_in!r}, which is read as the data; "
                    "writing there could replace or add a shard of it\nwrite the output elsewhere"
                )
        if flag == "-o" and str(path).lower().endswith((".parquet", ".pq")):
            from .._extras import require

            require("pyarrow", f"-o {path}: writing parquet", "or write JSONL (-o rows.jsonl)")
        if _is_special(path):
            continue
        if os.path.isdir(path):
            raise UsageError(f"{flag} {path!r} is a folder, not a file\n"
                             f"name a file in it, e.g. {flag} {os.path.join(path, 'scored.jsonl')}")
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise UsageError(f"{flag} {path!r}: the folder {folder!r} does not exist\n"
                             f"create it first (mkdir -p {folder}) or write elsewhere")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise UsageError(f"{flag} {path!r}: the folder {folder!r} is not writable\n"
                             "write the output to a folder you can write to")
        if os.path.exists(path) and not os.access(path, os.W_OK):
            raise UsageError(f"{flag} {path!r} is read-only\nmake it writable, or write the output elsewhere")


# ---- during the run ----------------------------------------------------------------------------

class ScoredRows:
    """Where scored rows go: stdout, or a temporary file in the output's folder that becomes the
    output when the run ends well (a failed run removes it; an interrupted one keeps it as
    ``OUTPUT.partial``)."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.rows = 0
        self.tmp: str | None = None
        self.kept: str | None = None
        self._f: Any = None
        self._parquet: ParquetRows | None = None
        self.namespace: str | None = None
        self._failed = False

    def __enter__(self) -> ScoredRows:
        if self.path is None:
            self._f = None  # opened by prints_to_stderr (it knows where stdout went)
        elif _is_special(self.path):
            self._f = open(
                self.path, "wb" if self.parquet else "w", encoding=None if self.parquet else "utf-8"
            )
        else:
            folder, base = os.path.split(os.path.abspath(self.path))
            self.tmp = os.path.join(folder, f".{base}.{os.getpid()}.tmp")
            try:
                fd = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            except OSError as exc:
                self.tmp = None
                raise UsageError(
                    f"cannot create a file in {folder!r} for -o {self.path!r}: {exc.strerror}"
                ) from None
            if self.parquet:
                os.close(fd)  # the name is ours; ParquetRows writes (and may rewrite) the file by name
            else:
                self._f = os.fdopen(fd, "w", encoding="utf-8")
        return self

    @property
    def parquet(self) -> bool:
        """Whether the rows are written as parquet (an output path ending in ``.parquet``)."""
        return bool(self.path) and str(self.path).lower().endswith((".parquet", ".pq"))

    def write(self, rows: Iterable[Mapping[str, Any]]) -> None:
        if self.parquet:
            rows = list(rows)
            if self._parquet is None:
                from ._parquet_out import ParquetRows

                self._parquet = ParquetRows(self.tmp, str(self.path), self._f, self.namespace)
            try:
                self._parquet.write(rows)
            except OSError as exc:
                raise self._cannot_write(exc) from None
            self.rows += len(rows)
            return
        lines = []
        for row in rows:
            try:
                lines.append(_ENCODE(row))
            except (RecursionError, ValueError) as exc:
                raise UsageError(f"row {self.rows + len(lines) + 1} cannot be written as JSON: "
                                 f"{type(exc).__name__}: {exc}") from None
        self.write_text("\n".join(lines) + "\n" if lines else "", len(lines))

    def write_text(self, text: str, rows: int) -> None:
        """``rows`` rows already encoded as JSON lines (as :meth:`write` encodes them), to a JSONL output."""
        try:
            self._f.write(text)
            self._f.flush()
        except OSError as exc:
            if self.path is None:
                raise
            raise self._cannot_write(exc) from None
        self.rows += rows

    def where_kept(self) -> str:
        if self.path is None:
            return f"the {self.rows} rows scored so far were written to stdout"
        if self.kept:
            return f"the {self.rows} rows scored so far are in {self.kept} ({self.path} is unchanged)"
        return f"{self.path} is unchanged"

    def __exit__(self, typ: Any, exc: Any, tb: Any) -> None:
        f, self._f = self._f, None
        if self.path is None:
            return
        try:
            if self._parquet is not None:
                self._parquet.close(complete=typ is None)
            if f is not None:
                f.close()
        except UsageError:
            self._discard()
            raise
        except OSError as err:
            if typ is None:
                self._discard()
                raise self._cannot_write(err) from None
        if self.tmp is None:
            return
        if typ is None:
            os.replace(self.tmp, self.path)
        elif self.rows and (issubclass(typ, Interrupted) or (  # the rows paid for are kept
                issubclass(typ, RewardhubError) and not issubclass(typ, UsageError) and not self._failed)):
            kept, n = f"{self.path}.partial", 1
            while os.path.exists(kept):
                kept, n = f"{self.path}.partial.{n}", n + 1
            os.replace(self.tmp, kept)
            self.kept = kept
        else:
            self._discard()
        self.tmp = None

    def _cannot_write(self, exc: OSError) -> RewardhubError:
        self._failed = True  # the file may be cut short: not kept
        return RewardhubError(f"cannot write the scored rows to {self.path!r}: {exc.strerror}\n"
                              f"{self.path} is unchanged; make room (or write elsewhere) and run again")

    def _discard(self) -> None:
        if self.tmp and os.path.exists(self.tmp):
            os.unlink(self.tmp)
        self.tmp = None


@contextlib.contextmanager
def prints_to_stderr(out: ScoredRows | None = None) -> Iterator[None]:
    """While rewards run, what they print (``print``, or a write to file descriptor 1 by the process
    or the worker processes it starts) goes to stderr; stdout is itself again afterwards. The rows of
    an ``out`` written to stdout go to where stdout was."""
    sys.stdout.flush()
    try:
        fd, err_fd = sys.stdout.fileno(), sys.stderr.fileno()
    except (AttributeError, ValueError, io.UnsupportedOperation):  # not file descriptors (a test's capture)
        fd = err_fd = None
    real_stdout, saved = sys.stdout, None
    if fd is not None and err_fd is not None:
        saved = os.dup(fd)
        os.dup2(err_fd, fd)
    rows = out if out is not None and out.path is None else None
    if rows is not None:
        rows._f = os.fdopen(os.dup(saved), "w", encoding="utf-8") if saved is not None else real_stdout
    sys.stdout = sys.stderr
    try:
        yield
    finally:
        sys.stdout = real_stdout
        if rows is not None and saved is not None and rows._f is not None:
            with contextlib.suppress(OSError):
                rows._f.close()
        if saved is not None and fd is not None:
            with contextlib.suppress(OSError):
                real_stdout.flush()
            os.dup2(saved, fd)
            os.close(saved)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """SIGTERM and SIGHUP (the terminal closed) raise :class:`~rewardhub.Interrupted` in the main thread,
    as Ctrl-C does, so that a stopped run keeps its rows; a SIGHUP ignored when the run began (``nohup``)
    stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_signal(signum: int, frame: Any) -> None:
        raise Interrupted(signal.Signals(signum).name)

    old: dict[int, Any] = {}
    for sig in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
        if sig is None or (sig != signal.SIGTERM and signal.getsignal(sig) is signal.SIG_IGN):
            continue
        old[sig] = signal.signal(sig, on_signal)
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)



# ---- after the run -----------------------------------------------------------------------------

def write_summary(path: str, summary: Mapping[str, Any], rows_at: str | None) -> None:
    """Write the summary JSON (through a temporary file); a failure says where the rows are."""
    folder, base = os.path.split(os.path.abspath(path))
    tmp = path if _is_special(path) else os.path.join(folder, f".{base}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(nulls_for_non_finite(summary), f, indent=2, sort_keys=True, allow_nan=False)
        if tmp != path:
            os.replace(tmp, path)
    except OSError as exc:
        if tmp != path:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        where = f"the scored rows are in {rows_at}" if rows_at else "the scored rows were written to stdout"
        raise RewardhubError(f"cannot write --summary-json {path!r}: {exc.strerror}\n{where}") from None
