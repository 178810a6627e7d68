"""Which command of a launch script runs verl, and which of its words are the run's overrides
(see :mod:`rewardhub.verl._shell`, which splits and expands the script)."""

from __future__ import annotations

import re
from typing import Any

from ..config.overrides import is_override_word
from ..config.overrides import parse_override
from ..errors import UsageError
from ._shell import ASSIGN_RE
from ._shell import NAME_RE
from ._shell import Raw
from ._shell import Reader
from ._shell import Script
from ._shell import ShellWord
from ._shell import Unsafe
from ._shell import literal_head
from ._shell_words import brace_expansion

__all__ = ["VERL_CONFIGS", "entry_point", "pick_verl_run", "public_words", "read_script"]

_VERL_RE = re.compile(r"(^|[/.])(verl|recipe)([/.][\w/.]*)?[/.](main_\w+|fully_async_main)(\.py)?$")
#: verl's own base configs (``--config-name``); the fully-async ones run fully-async training
VERL_CONFIGS = (
    "ppo_trainer",
    "ppo_megatron_trainer",
    "fully_async_ppo_trainer",
    "fully_async_ppo_megatron_trainer",
)
#: ``--config-path`` folders that hold verl's own configs (in a verl checkout)
_VERL_CONFIG_DIRS = ("verl/trainer/config", "fully_async_policy/config")


def entry_point(words: list[ShellWord]) -> dict[str, Any] | None:
    for k, w in enumerate(words):
        module = w.text
        if _VERL_RE.search(module) and (k == 0 or words[k - 1].text == "-m" or module.endswith(".py")):
            mode = "fully_async" if re.search(r"fully_async_main(\.py)?$", module) else "sync"
            return {"module": module, "mode": mode, "line": w.line, "index": k}
    return None


def pick_verl_run(runs: list[Any]) -> Script:
    verl = [run for run in runs if run[2] is not None]
    if len(verl) > 1:
        lines = ", ".join(str(run[2]["line"]) for run in verl)
        raise UsageError(f"the script runs verl more than once (lines {lines})\nkeep one verl command per "
                         "script, or pass the overrides of the run you mean")
    if verl:
        _, words, entry, _ = verl[0]
        _check_unsafe(verl[0])
        for run in runs:
            if run[2] is None and run[1] and is_override_word(run[1][0].text):
                raise UsageError(
                    f"line {run[1][0].line}: {run[1][0].text!r} is a command of its own, not an argument "
                    f"of the verl command (line {entry['line']}): the line before it does not end "
                    "with \\\nend every line of the command but the last with \\ (nothing after it)"
                )
        after = words[entry["index"] + 1:]
        out: list[ShellWord] = []
        k = 0
        while k < len(after):
            w = after[k]
            flag, _, inline = w.text.partition("=")
            if flag in ("--config-name", "-cn", "--config-path", "-cp", "--config-dir", "-cd"):
                value = inline if inline else (after[k + 1].text if k + 1 < len(after) else "")
                k += 1 if inline else 2
                if flag in ("--config-path", "-cp", "--config-dir", "-cd") and \
                        value.rstrip("/").endswith(_VERL_CONFIG_DIRS):
                    continue  # verl's own folder: --config-name then picks one of verl's configs
                if flag in ("--config-name", "-cn") and value in VERL_CONFIGS:
                    if value.startswith("fully_async"):
                        entry["mode"] = "fully_async"
                    continue
                raise UsageError(f"line {w.line}: {flag} {value}: the run's base config is not verl's own "
                                 f"({', '.join(VERL_CONFIGS)}) and is not read here\npass that YAML file as "
                                 "the config, with the script's overrides after it")
            if is_override_word(w.text):
                out.append(w)
            elif w.text != "":
                raise UsageError(
                    f"line {w.line}: {w.text!r} is not a KEY=VALUE override of the verl command\n"
                    "write the verl command's arguments as overrides only"
                )
            k += 1
        entry.pop("index", None)
        return Script(out, entry)
    carrying = [run for run in runs if any(is_override_word(w.text) for w in run[1])]
    pure = all(all(is_override_word(w.text) for w in run[1]) for run in carrying)
    if len(carrying) > 1 and not pure:
        lines = ", ".join(str(run[1][0].line) for run in carrying)
        raise UsageError(f"no verl command (python3 -m verl.trainer.main_ppo ...) found, and the commands on "
                         f"lines {lines} all carry KEY=VALUE words\nkeep the overrides of one command")
    for run in carrying:
        _check_unsafe(run)
    return Script([w for run in carrying for w in run[1] if is_override_word(w.text)])


def _check_unsafe(run: Any) -> None:
    if run[3]:
        raise UsageError(f"{run[3][0]}\nwrite the value out in the script (or set the variable in it)")


def public_words(r: Reader, raw: Any, where: str) -> list[tuple[str, bool]]:
    """The words ``raw`` expands to, each override in its reference form where that reads as the same
    config value: a value that came from the environment (``api_key=$MY_SECRET``, ``"Bearer $TOKEN"``,
    ``$HOME/data``, also through a variable the script set from it) stays ``${oc.env:NAME}``, resolved
    when the config is loaded, so no written config (``run.json``, checkpoints, trackers, ``migrate``)
    holds the secret, as with a YAML config's ``${oc.env:NAME}``. Where the text read would be another
    kind of value (a number, a boolean: ``trainer.nnodes=$NNODES``), it is the value itself."""
    words = r.expand(raw, where)
    r.keep_env = True
    try:
        kept = r.expand(raw, where)
    except Unsafe:
        return words
    finally:
        r.keep_env = False
    if len(kept) != len(words):
        return words
    return [(k if k != w and _same_value(w, k) else w, whole) for (w, whole), (k, _) in zip(words, kept)]


def _same_value(word: str, kept: str) -> bool:
    """Whether override ``kept`` (with ``${oc.env:NAME}`` in it) sets the same key as ``word``, to a
    value of the same shape (strings where ``word`` has strings, the same other values)."""
    if not (is_override_word(word) and is_override_word(kept)):
        return False
    a, b = parse_override(word), parse_override(kept)
    return a.key == b.key and a.op == b.op and _same_shape(a.value, b.value)


def _same_shape(a: Any, b: Any) -> bool:
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_shape(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_shape(a[k], b[k]) for k in a)
    if isinstance(a, str) and isinstance(b, str):
        return True
    return type(a) is type(b) and a == b


#: the words that open and close a block whose body runs or not, once or many times, as the script runs
_BLOCK_START = ("if", "for", "while", "until", "select", "case")
_BLOCK_END = ("fi", "done", "esac")
#: a keyword that a block's command may follow on its line (``then ARGS+=(x)``)
_BLOCK_BODY = ("then", "do", "else", "{")


def _declares(words: list[ShellWord]) -> bool:
    """Whether the words so far are ``export`` / ``declare -a`` / ``local`` ... (then an assignment)."""
    return bool(words) and words[0].text in ("export", "local", "declare", "readonly", "typeset") and \
        all(w.text.startswith("-") for w in words[1:])


_SUBSHELL = "in a subshell"


def _apart(r: Reader, index: int) -> str:
    """Why what command ``index`` assigns may not be what the script goes on with (``""``: it is)."""
    op, subshell = r.ops[index]
    after = r.ops[index + 1][0] if index + 1 < len(r.ops) else ""
    if subshell or op in ("|", "&", "(") or after in ("|", "&"):
        return _SUBSHELL
    if op in ("&&", "||"):
        return f"set after {op}, only if the command before it {'succeeds' if op == '&&' else 'fails'}"
    return ""


def _plain(raw: Any) -> str | None:
    """The word's text where it is plain text (no expansion in it), else None."""
    return "".join(p[1] for p in raw.parts) if all(p[0] == "text" for p in raw.parts) else None


def _empty_test(cmd: list[Any]) -> tuple[str, bool] | None:
    """(NAME, whether the test is true for an empty NAME) where ``cmd`` is ``[ -z "$NAME" ]``,
    ``[[ -n $NAME ]]``, ``test -z "${NAME}"`` ..., else None."""
    plain = [_plain(raw) for raw in cmd]
    if not cmd or plain[0] not in ("[", "[[", "test"):
        return None
    closer = {"[": "]", "[[": "]]", "test": None}[plain[0]]
    body = cmd[1:-1] if closer else cmd[1:]
    if (closer and plain[-1] != closer) or len(body) != 2 or _plain(body[0]) not in ("-z", "-n"):
        return None
    parts = body[1].parts
    if len(parts) != 1 or parts[0][0] not in ("var", "default"):
        return None
    kind, payload, quoted, _ = parts[0]
    name = payload if kind == "var" else payload[0]
    if (kind == "default" and payload[1] != "") or not NAME_RE.fullmatch(name):
        return None
    if not quoted and plain[0] != "[[" and _plain(body[0]) == "-n":
        return None  # [ -n $N ] with N empty is [ -n ], which is true
    return name, _plain(body[0]) == "-z"


def _default_idiom(r: Reader, commands: list[list[Any]], index: int) -> list[int]:
    """``if [ -z "$N" ]; then N=v; fi``, ``[ -z "$N" ] && N=v`` and ``[ -n "$N" ] || N=v`` read as
    ``N=${N:-v}``, as bash runs them: the indexes of the commands so read, or ``[]``."""
    cmd = commands[index]
    block = bool(cmd) and _plain(cmd[0]) == "if"
    test = _empty_test(cmd[1:] if block else cmd)
    if test is None or r.ops[index][0] not in ("",) or r.depth:
        return []
    name, empty = test
    if block:  # then N=v (on one line or two), then fi
        words = [raw for k in range(index + 1, min(index + 4, len(commands))) for raw in commands[k]]
        ends = [k for k in range(index + 1, min(index + 4, len(commands))) if _plain(commands[k][0]) == "fi"]
        if not ends or not empty or [_plain(x) for x in words[:1]] != ["then"]:
            return []
        used = list(range(index, ends[0] + 1))
        body = [raw for k in used[1:-1] for raw in commands[k]][1:]
        if len(commands[ends[0]]) != 1 or any(r.ops[k][0] for k in used[1:]):
            return []
    else:
        if index + 1 >= len(commands) or r.ops[index + 1][0] != ("&&" if empty else "||"):
            return []
        if index + 2 < len(commands) and r.ops[index + 2][0] in ("&&", "||", "|", "&"):
            return []
        body, used = commands[index + 1], [index, index + 1]
    if len(body) != 1 or body[0].items is not None or ASSIGN_RE.match(literal_head(body[0])) is None or \
            ASSIGN_RE.match(literal_head(body[0])).group(0) != name + "=":  # type: ignore[union-attr]
        return []
    value = r.s[body[0].start + len(name) + 1:body[0].end]
    if "}" in value:
        return []  # not written as ${N:-...} here: left to the general rule (refused where used)
    parts = [("text", name + "=", False, False), ("default", (name, value), False, False)]
    raw = Raw(body[0].start, body[0].end, parts)
    r.assign(raw, f"line {r.line(body[0].start)}", public_words)
    return used


def read_script(text: str) -> Script:
    """The override words of ``text`` (a launch script or a file of overrides) and the verl entry point."""
    r = Reader(text)
    runs: list[tuple[int, list[ShellWord], dict[str, Any] | None, list[str]]] = []
    commands = r.commands()
    skip: set[int] = set()
    for index, cmd in enumerate(commands):
        if index in skip:
            continue
        default = _default_idiom(r, commands, index)
        if default:
            skip.update(default)
            continue
        while cmd and literal_head(cmd[0]) in _BLOCK_BODY and len(cmd[0].parts) == len(literal_head(cmd[0])):
            cmd = cmd[1:]  # then NAME=value: a command of its own
        if not cmd:
            continue
        apart = _apart(r, index)
        words: list[ShellWord] = []
        unsafe: list[str] = []
        position = 0
        head = literal_head(cmd[0])
        if head in _BLOCK_END:
            r.depth = max(0, r.depth - 1)
        assigning = True
        for raw in cmd:
            line = r.line(raw.start)
            lit = literal_head(raw)
            if assigning and ASSIGN_RE.match(lit) and (position == 0 or _declares(words)):
                # a subshell's assignment leaves the script's variables as they were
                if (len(cmd) == 1 or all(ASSIGN_RE.match(literal_head(x)) for x in cmd) or position) and \
                        apart != _SUBSHELL:
                    r.assign(raw, f"line {line}", public_words)
                    name = ASSIGN_RE.match(lit).group(1)  # type: ignore[union-attr]
                    brace = brace_expansion(raw) if position else ""  # export A={a,b}: bash expands it
                    why = apart or (brace and f"line {line} brace-expands {brace} into several assignments")
                    if why:
                        r.vars[name], r.why[name] = None, why
                        r.arrays.pop(name, None)
                continue
            assigning = assigning and (lit in ("export", "local", "declare", "readonly", "typeset") or
                                       (position > 0 and lit.startswith("-")))
            try:
                expanded = public_words(r, raw, f"line {line}")
            except Unsafe as exc:
                unsafe.append(str(exc))
                expanded = [("\x00", False)]  # a word that is not known here
            for t, whole in expanded:
                words.append(
                    ShellWord(text[raw.start : raw.end], t, raw.start, raw.end, index, position, line, whole)
                )
                position += 1
        if head in ("for", "select") and len(cmd) > 1:
            r.vars[literal_head(cmd[1])] = None
        elif head == "read":
            for raw in cmd[1:]:
                if NAME_RE.fullmatch(literal_head(raw)):
                    r.vars[literal_head(raw)] = None
        elif head in ("source", ".") and len(cmd) > 1:
            r.sourced = f"line {r.line(cmd[0].start)}: {head} {text[cmd[1].start:cmd[1].end]}"
        elif head in ("cd", "pushd", "popd"):
            r.cwd_known = False
        elif head == "unset":
            for raw in cmd[1:]:
                r.vars.pop(literal_head(raw), None)
        if head in _BLOCK_START:
            r.block = r.block if r.depth else f"the {head} block on line {r.line(cmd[0].start)}"
            r.depth += 1
        entry = entry_point(words)
        if entry is not None or any(w.text != "\x00" and is_override_word(w.text) for w in words) or unsafe:
            runs.append((index, words, entry, unsafe))
    return pick_verl_run(runs)
