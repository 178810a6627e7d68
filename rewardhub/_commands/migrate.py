"""``rewardhub migrate [FILE] [KEY=VALUE ...] [--report json] [--write]``: legacy reward keys -> ``reward:``.

FILE is a YAML config or a shell launch script (or a file of overrides, one per line). The migrated
config is printed as YAML (comments of a YAML file kept), or with ``--report json`` as
``{"config", "moved", "dropped", "notes"}``. ``--write`` rewrites FILE in place after saving
``FILE.bak``: a YAML file keeps its comments and the order of untouched keys; in a shell script
only the legacy override words change, every other byte stays as it was.
"""

from __future__ import annotations

import argparse
import copy
import io
import json
import os
import re
import shlex
import shutil
import sys
import warnings
from collections.abc import Mapping
from collections.abc import MutableMapping
from typing import Any

from ..errors import UsageError

NAME = "migrate"
HELP = "move legacy (verl-style) reward keys of a config or launch script to the reward: schema"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("items", nargs="*", metavar="[FILE] [KEY=VALUE ...]",
                        help="a YAML config or shell launch script, then overrides (Hydra's +key=value too)")
    parser.add_argument(
        "--report", choices=["json"], help="print the config and the moved/dropped keys as JSON"
    )
    parser.add_argument(
        "--write", action="store_true", help="rewrite FILE in place (a backup FILE.bak is kept)"
    )


def split_items(items: list[str]) -> tuple[str | None, list[str]]:
    """The optional FILE, then the override tokens."""
    from ..config.overrides import is_override_word

    if items and (os.path.exists(items[0]) or not is_override_word(items[0])):
        path, rest = items[0], items[1:]
        if not os.path.exists(path):
            raise UsageError(f"config file {path!r} does not exist\n"
                             "pass an existing YAML file or launch script, or only KEY=VALUE overrides")
        return path, rest
    return None, list(items)


def run(args: argparse.Namespace) -> int:
    from ..config.loader import read_migrated
    from ..config.schema import validate_reward
    from ..verl.shim import unknown_line

    path, overrides = split_items(args.items)
    if args.write and not path:
        raise UsageError("--write needs a FILE to rewrite\nrewardhub migrate FILE --write")
    if args.write and overrides:
        raise UsageError("--write rewrites FILE alone; overrides would not be saved\n"
                         "put them into FILE first, or drop --write to print the result")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the report below lists every key once
        # the loader's own steps (the file read once; a misspelt verl key is warned about below, not raised)
        read = read_migrated(path, overrides, keep_unknown=True)
    text, kind, source, cfg, report = read.text, read.kind, read.source, read.config, read.report
    validate_reward(cfg.get("reward"))  # a migrated config must also be a valid one
    if args.write:
        assert path is not None
        # the file's reward keys are rewritten; verl's trainer keys stay (`rewardhub train` maps them on load)
        new_text = (
            rewrite_script(text, path) if kind == "shell" else yaml_roundtrip(text, _reward_only(source))
        )
        if new_text != text:
            backup = write_in_place(path, new_text)
            print(f"rewrote {path} (backup: {backup})", file=sys.stderr)
        else:
            print(f"{path}: nothing to migrate", file=sys.stderr)
    if args.report == "json":
        out = {"config": cfg, **report.as_dict()}
        sys.stdout.write(json.dumps(out, indent=2, sort_keys=True, default=str) + "\n")
    elif not args.write:
        if path and kind == "yaml":
            sys.stdout.write(yaml_roundtrip(text, cfg) if not overrides else _dump(cfg))
        else:
            sys.stdout.write(_dump(cfg))
    for u in report.unknown:  # verl has no such key: left out of the printed config, left as it is in FILE
        print(f"WARNING: {unknown_line(u)}", file=sys.stderr)
    if args.report != "json":
        _print_summary(report)
    return 0


def _reward_only(source: Mapping[str, Any]) -> dict[str, Any]:
    """The file's content ``source`` with its legacy reward keys migrated and nothing else changed
    (what ``--write`` saves); a misspelt legacy key stays where it was, for the user to fix."""
    from ..config.overrides import apply_overrides
    from ..config.overrides import format_value
    from ..verl.shim import migrate

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        new, report = migrate(copy.deepcopy(dict(source)))
    return apply_overrides(new, [f"{u['key']}={format_value(u['value'])}" for u in report.unknown])


def _print_summary(report: Any) -> None:
    err = sys.stderr
    if not (report.moved or report.dropped):
        print("no legacy reward keys: nothing to migrate", file=err)
        return
    print(f"moved {len(report.moved)} legacy key(s), dropped {len(report.dropped)}:", file=err)
    for m in report.moved:
        print(f"  {m['from']} -> {m['to']}", file=err)
    for d in report.dropped:
        print(f"  {d['key']}={d['value']!r} dropped: {d['reason']}", file=err)
    for note in report.notes:
        print(f"  note: {note}", file=err)


def _dump(cfg: Mapping[str, Any]) -> str:
    import yaml

    return yaml.safe_dump(dict(cfg), sort_keys=False, default_flow_style=False, allow_unicode=True)


def write_in_place(path: str, new_text: str) -> str:
    """Replace ``path``'s text, keeping a backup; returns the backup's path.

    The new text goes to a temporary file in the same folder that then takes the file's place, so
    the file is never half-written; when anything fails, neither the backup nor the temporary file
    is left behind and the file is as it was.
    """
    import tempfile

    if not os.access(path, os.W_OK):
        raise UsageError(f"cannot rewrite {path!r}: the file is read-only\n"
                         f"make it writable (chmod u+w {shlex.quote(path)}), or drop --write to print the "
                         "migrated config")
    folder = os.path.dirname(os.path.abspath(path))
    backup, n = path + ".bak", 1
    while os.path.exists(backup):
        backup, n = f"{path}.bak.{n}", n + 1
    try:
        shutil.copy2(path, backup)
    except OSError as exc:
        raise UsageError(f"cannot save a backup of {path!r} in {folder!r}: {exc.strerror}\n"
                         "make the folder writable, or drop --write to print the migrated config") from None
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=folder)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(new_text)
        shutil.copymode(path, tmp)
        os.replace(tmp, path)
    except OSError as exc:
        for leftover in (tmp, backup):
            if leftover and os.path.exists(leftover):
                os.unlink(leftover)
        raise UsageError(f"cannot rewrite {path!r}: {exc.strerror}\n{path} is unchanged") from None
    return backup


# ---- YAML, comments kept ------------------------------------------------------------------------

def yaml_roundtrip(text: str, new: Mapping[str, Any]) -> str:
    """``text`` edited in place to equal ``new``: untouched keys keep their comments and order."""
    from ruamel.yaml import YAML

    yaml = YAML()
    yaml.preserve_quotes = True
    yaml.indent(mapping=2, sequence=4, offset=2)
    doc = yaml.load(text)
    if doc is None:
        doc = {}
    _sync(doc, new)
    buf = io.StringIO()
    yaml.dump(doc, buf)
    return buf.getvalue()


def _sync(node: Any, new: Any) -> Any:
    """Make ``node`` (a ruamel container) equal to ``new``, reusing nodes that already agree."""
    if isinstance(node, MutableMapping) and isinstance(new, Mapping):
        for key in [k for k in node if k not in new]:
            del node[key]
        for key, value in new.items():
            if key in node:
                node[key] = _sync(node[key], value)
            else:
                node[key] = value
        return node
    if isinstance(node, list) and isinstance(new, list):
        for i, value in enumerate(new):
            if i < len(node):
                node[i] = _sync(node[i], value)
            else:
                node.append(value)
        del node[len(new):]
        return node
    return node if node == new and type(node) is type(new) else new


# ---- shell scripts: only override words change ---------------------------------------------------

_SEP_RE = re.compile(r"^(?:[ \t]|\\\n|\n)*$")


def rewrite_script(text: str, path: str = "<script>") -> str:
    """Replace a script's legacy override words by ``reward.*`` ones; every other byte is kept.

    The new words go where the first legacy word was, separated the way the script separates its
    words there (`` \\<newline>    `` in a multi-line command); the other legacy words are removed
    with the whitespace before them.
    """
    from ..config.overrides import apply_overrides
    from ..config.overrides import format_value
    from ..config.overrides import leaves
    from ..config.overrides import parse_override
    from ..verl.scripts import read_script
    from ..verl.shim import is_legacy_key
    from ..verl.shim import migrate

    words = read_script(text).words
    parsed = [parse_override(w.text) for w in words]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        unknown = {u["key"] for u in migrate(apply_overrides({}, parsed))[1].unknown}
    # a misspelt key stays as it is, for the user to fix (migrate warns about it)
    legacy = [i for i, ov in enumerate(parsed) if is_legacy_key(ov.key) and ov.key not in unknown]
    if not legacy:
        return text
    for k in legacy:
        if not words[k].whole:  # one of the words of an expansion ($ARGS): its text is not in the script
            raise UsageError(
                f"{path}: line {words[k].line}: {parsed[k].key} comes from {words[k].raw}, which --write "
                "cannot rewrite\nmove it out of the variable into the command, or drop --write to "
                "print the migrated config"
            )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        before = migrate(apply_overrides({}, [ov for i, ov in enumerate(parsed) if i not in legacy]))[0]
        after, report = migrate(apply_overrides({}, parsed))
    old_leaves = dict(leaves(before.get("reward") or {}, "reward", lists=True))
    new_leaves = [
        (k, v)
        for k, v in leaves(after.get("reward") or {}, "reward", lists=True)
        if old_leaves.get(k, _MISSING) != v
    ]

    # a moved key keeps the exact text its value had in the script ($HOME, quotes and all)
    raw_value: dict[str, tuple[str, Any]] = {}
    by_key = {parsed[i].key: i for i in legacy}
    for m in report.moved:
        i = by_key.get(m["from"])
        if i is None:
            continue
        raw = words[i].raw
        head = raw.split("=", 1)[0]
        if "=" in raw and head.lstrip("+~") == parsed[i].key:
            raw_value[_dotted(m["to"])] = (raw.split("=", 1)[1], parsed[i].value)
    tokens = []
    for key, value in new_leaves:
        kept = raw_value.get(key)
        if kept is not None and kept[1] == value:
            tokens.append(f"{key}={kept[0]}")
        else:
            token = f"{key}={format_value(value)}"
            tokens.append(token if re.fullmatch(r"[\w.+=:/,\-@%]*", token) else shlex.quote(token))

    first = legacy[0]  # the new words go in its place
    out, pos = [text[:words[first].start], _separator(text, words, first).join(tokens)], words[first].end
    for i in legacy[1:]:  # i > first: word i - 1 exists
        prev_end = words[i - 1].end
        removed_from = prev_end if _SEP_RE.match(text[prev_end:words[i].start]) and prev_end >= pos else None
        out.append(text[pos:words[i].start if removed_from is None else removed_from])
        pos = words[i].end
    out.append(text[pos:])
    return "".join(out)


_MISSING = object()


def _separator(text: str, words: list[Any], i: int) -> str:
    """The whitespace between word ``i`` and its neighbour (the one before, else after)."""
    for a, b in ((i - 1, i), (i, i + 1)):
        gap = text[words[a].end:words[b].start] if a >= 0 and b < len(words) else ""
        if gap and _SEP_RE.match(gap):
            return gap
    return " "


def _dotted(key: str) -> str:
    return re.sub(r"\[(\d+)\]", r".\1", key)


